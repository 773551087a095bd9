"""The sandbox API server's store wakes a parked watcher only for commits it watches
(``Store.wake_on_commit``): one namespace's writes do not wake every other namespace's watches, as
kube-apiserver's watch cache dispatches by key (a seed's fifty namespaces each watch the control
cluster)."""

from __future__ import annotations

import asyncio

from mcm_sandbox.apiserver.store import ADDED, Store


def _obj(namespace: str, name: str) -> dict[str, object]:
    return {"metadata": {"namespace": namespace, "name": name, "uid": f"{namespace}-{name}"}}


def test_only_the_watchers_of_a_commit_wake() -> None:
    async def run() -> tuple[bool, bool, bool, bool]:
        loop = asyncio.get_running_loop()
        store = Store()
        mine, other_ns, other_kind, everything = (loop.create_future() for _ in range(4))
        store.wake_on_commit(mine, "machines", "shoot-a")
        store.wake_on_commit(other_ns, "machines", "shoot-b")
        store.wake_on_commit(other_kind, "nodes", None)
        store.wake_on_commit(everything)
        store.commit("machines", ADDED, _obj("shoot-a", "m-1"), None)
        return mine.done(), other_ns.done(), other_kind.done(), everything.done()

    assert asyncio.run(run()) == (True, False, False, True)


def test_a_cluster_wide_watcher_wakes_for_every_namespace_of_its_kind() -> None:
    async def run() -> bool:
        loop = asyncio.get_running_loop()
        store = Store()
        waiter = loop.create_future()
        store.wake_on_commit(waiter, "machines", None)
        store.commit("machines", ADDED, _obj("shoot-z", "m-9"), None)
        return waiter.done()

    assert asyncio.run(run())
