"""Seed mode's namespace watch against the sandbox API server: the seed informer lists the selected
Namespaces when one changed, not at every round (``informers.namespace_watch``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from kubernetes.client import ApiClient

from informers.namespace_watch import NamespaceWatch
from informers.seed import SeedInformer
from mcm_sandbox.procs import wait_until
from mcm_tasks import kinds
from mcm_tasks.kube import ops
from mcm_tasks.settings import Settings, load_settings

pytestmark = pytest.mark.integration
TIMEOUT = 10.0


@pytest.fixture()
def label() -> str:
    return f"seed-{uuid.uuid4().hex[:8]}"


@pytest.fixture()
def settings(redis_url: str, label: str) -> Settings:
    return load_settings({"redis_url": redis_url, "namespace_selector": f"{label}=true"})


def namespace(api: ApiClient, name: str, labels: dict[str, str]) -> None:
    ops.create(api, kinds.NAMESPACE.resource, {"metadata": {"name": name, "labels": labels}})


@pytest.fixture()
def seed(kube_api: ApiClient, settings: Settings, redis_client: redis.Redis) -> Iterator[SeedInformer]:
    informer = SeedInformer(settings, kube_api, redis_client)
    informer.watch = NamespaceWatch(kube_api, settings).start()
    yield informer
    informer.watch.stop()


def test_the_namespaces_are_listed_again_only_when_a_selected_one_changed(
    kube_api: ApiClient, seed: SeedInformer, label: str
) -> None:
    watch = seed.watch
    assert watch is not None
    first = f"{label}-a"
    namespace(kube_api, first, {label: "true"})
    wait_until(lambda: watch.events >= 1, TIMEOUT, what="the watch saw the namespace")
    assert seed._list() == {first}
    lists = seed.lists
    for _ in range(5):  # rounds with nothing changed: the list as last read
        assert seed._list() == {first}
    assert seed.lists == lists

    events = watch.events
    namespace(kube_api, f"{label}-other", {"unrelated": "true"})  # not selected: no event
    second = f"{label}-b"
    namespace(kube_api, second, {label: "true"})
    wait_until(lambda: watch.stale.is_set(), TIMEOUT, what="the list marked stale")
    assert watch.events == events + 1, "only the selected namespace's change"
    assert seed._list() == {first, second}
    assert seed.lists == lists + 1

    ops.delete(kube_api, kinds.NAMESPACE.resource, first)
    wait_until(lambda: watch.stale.is_set(), TIMEOUT, what="a deletion marks it stale")
    assert seed._list() == {second}  # gone, or Terminating: not served either way
    assert seed.lists == lists + 2


def test_a_failed_watch_lists_every_round_until_it_is_back(
    kube_api: ApiClient, settings: Settings, redis_client: redis.Redis, label: str
) -> None:
    """A watch that cannot run (here: refused, an invalid selector it shares with the LIST) keeps
    the list stale; the seed informer then lists each round as it did without a watch."""
    informer = SeedInformer(settings, kube_api, redis_client)
    watch = NamespaceWatch(kube_api, settings.model_copy(update={"namespace_selector": "!!bad"})).start()
    informer.watch = watch
    try:
        namespace(kube_api, f"{label}-c", {label: "true"})
        for _ in range(3):
            assert informer._list() == {f"{label}-c"}
            wait_until(lambda: watch.stale.is_set(), TIMEOUT, what="stale again after the failed watch")
        assert informer.lists == 3
    finally:
        watch.stop()
