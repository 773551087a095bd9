"""The controller under a lagging informer (issue 29): every watch of the informer is delayed 3 s by
a proxy in front of both API servers (``mcm_sandbox.watchdelay``), while workers talk to them
directly, as on a loaded API server. A worker SIGKILLed while its MachineSet pass creates machines
must not make the set create one machine too many: the next pass ends the dead pass's expectations
on the API server's list, not on a mirror that has not seen the creations yet. The mirror's lag
shows as ``mcm_informer_lag_seconds``. A rolling update of 20 (maxSurge 2, maxUnavailable 0) under
the lag completes within its budget: the passes of each step wake each other and read live while the
mirror lags (``controllers/common/lagging.py``; its time against the rollout without lag is
``bench/lag.py``'s figure)."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from kubernetes.client import ApiClient

from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.celery_app import celery_config
from mcm_tasks.kube import ops
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.settings import get_settings
from tests.e2e.support import connected, faults, local_class, machine_set, running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

NS = "default"
LAG = 3.0
REPLICAS = 10
LOCK_TTL = 8.0
ENV = {
    "MCM_RECONCILE_LOCK_TTL": f"{LOCK_TTL:g}s",
    "MCM_WORKER_LOST_TIMEOUT": "45s",
    "MCM_EXPECTATIONS_TIMEOUT": "240s",
}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(
        Path(tmp_path_factory.mktemp("lag-e2e")), ENV, with_beat=False, informer_watch_delay=LAG
    ) as started:
        yield started


@pytest.fixture(scope="module")
def clients(sandbox: Sandbox) -> Iterator[tuple[ApiClient, ApiClient, redis.Redis]]:
    with connected(sandbox) as made:
        local_class(made[0], "lag", {"bootDelaySeconds": 0.5}, NS)
        yield made


@pytest.fixture()
def celery(sandbox: Sandbox) -> Iterator[Celery]:
    app = Celery("lag-e2e", set_as_current=False)
    app.conf.update(celery_config(get_settings().model_copy(update={"redis_url": sandbox.redis_url})))
    try:
        yield app
    finally:
        app.close()


def machines(control: ApiClient, name: str) -> list[dict[str, Any]]:
    return list(ops.list_(control, kinds.MACHINE.resource, NS, label_selector=f"set={name}")["items"])


def lock_of(client: redis.Redis, key: str) -> tuple[float, str] | None:
    raw = client.hget(queue_keys("machineset").locks, key)
    if raw is None:
        return None
    expiry, _, holder = raw.decode().split("|", 2)
    return float(expiry), holder


def worker_running(sandbox: Sandbox, celery: Celery, message_id: str) -> int:
    for node, requests in (celery.control.inspect(timeout=1.0).active() or {}).items():
        if any(r["id"] == message_id for r in requests):
            return sandbox.pids[node.split("@", 1)[0]]
    return 0


def test_the_informer_lag_shows_as_a_metric(  # the fleet metrics are the informer's endpoint's
    sandbox: Sandbox, clients: tuple[ApiClient, ApiClient, redis.Redis]
) -> None:
    control, _, _ = clients
    ops.patch(control, kinds.MACHINE_CLASS.resource, "lag", {"metadata": {"annotations": {"poke": "1"}}}, NS)

    def lag() -> float:
        with urllib.request.urlopen(f"{sandbox.endpoints['informer']}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        values = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("mcm_informer_lag_seconds{") and 'kind="machineclasses"' in line
        ]
        return max(values, default=0.0)

    wait_until(lambda: lag() >= LAG - 0.5, 30, interval=0.5, what="mcm_informer_lag_seconds near the lag")
    assert lag() < LAG + 3


def test_a_worker_killed_mid_creation_under_lag_creates_no_extra_machine(
    sandbox: Sandbox, clients: tuple[ApiClient, ApiClient, redis.Redis], celery: Celery
) -> None:
    control, _, client = clients
    name, key = "lagging", f"{NS}/lagging"
    most = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            live = [m for m in machines(control, name) if not m["metadata"].get("deletionTimestamp")]
            most[0] = max(most[0], len(live))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    faults(sandbox, {"action": "latency", "latency_ms": 1000, "verbs": ["create"], "resources": ["machines"]})
    try:
        ops.create(control, kinds.MACHINE_SET.resource, machine_set(name, REPLICAS, "lag"))
        wait_until(lambda: 0 < len(machines(control, name)) < REPLICAS and lock_of(client, key) is not None,
                   60, interval=0.05, what="the set's first slow-start batch")  # fmt: skip
        found = lock_of(client, key)
        assert found is not None
        pids: list[int] = []

        def running_it(holder: str = found[1]) -> bool:
            pids.append(worker_running(sandbox, celery, holder))
            return pids[-1] > 0

        wait_until(running_it, 10, interval=0.1, what="the worker running the set's pass")
        os.killpg(pids[-1], signal.SIGKILL)
    finally:
        faults(sandbox, None)
    created = len(machines(control, name))
    assert created < REPLICAS, "killed mid-creation"
    wait_until(lambda: (lock_of(client, key) or (0.0, ""))[0] < time.time(), LOCK_TTL + 10, interval=0.2,
               what="the dead pass's lock to expire")  # fmt: skip
    ops.patch(control, kinds.MACHINE_SET.resource, name, {"metadata": {"annotations": {"poke": "1"}}}, NS)
    try:
        wait_until(
            lambda: len(machines(control, name)) == REPLICAS, 60, interval=0.2, what="the set complete"
        )
        time.sleep(4 * LAG)  # let the lagging mirror catch up and the set look again: still exact
        assert len(machines(control, name)) == REPLICAS
    finally:
        stop.set()
        watcher.join(5)
    assert most[0] == REPLICAS, f"at most {REPLICAS} machines at any time, saw {most[0]}"


ROLLED, SURGE = 20, 2


def roll_deployment(name: str, class_name: str) -> dict[str, Any]:
    labels = {"pool": name}
    return {
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": ROLLED, "minReadySeconds": 0, "selector": {"matchLabels": labels},
                 "strategy": {"type": "RollingUpdate",
                              "rollingUpdate": {"maxSurge": SURGE, "maxUnavailable": 0}},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"class": {"kind": "MachineClass", "name": class_name}}}},
    }  # fmt: skip


class Census(threading.Thread):
    """Every event of the deployment's machines, from a watch on the API server itself (not the
    delayed one): the most machines at once (terminating ones included) and the fewest available
    (Running, not being deleted), exactly, after each event."""

    def __init__(self, control: ApiClient, selector: str) -> None:
        super().__init__(daemon=True)
        self.control, self.selector = control, selector
        self.machines: dict[str, dict[str, Any]] = {}
        self.most, self.fewest_available = 0, 1 << 30
        self.stop = threading.Event()
        self.errors: list[str] = []
        listed = ops.list_(control, kinds.MACHINE.resource, NS, label_selector=selector)
        self.rv = str(listed["metadata"]["resourceVersion"])
        for m in listed["items"]:
            self.machines[m["metadata"]["name"]] = m
        self._count()

    def _count(self) -> None:
        available = sum(
            1 for m in self.machines.values()
            if ((m.get("status") or {}).get("currentStatus") or {}).get("phase") == "Running"
            and not m["metadata"].get("deletionTimestamp")
        )  # fmt: skip
        self.most = max(self.most, len(self.machines))
        self.fewest_available = min(self.fewest_available, available)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._follow()
            except Exception as err:  # a broken stream goes on from the last version seen
                self.errors.append(repr(err))
                time.sleep(0.2)

    def _follow(self) -> None:
        stream = ops.watch(self.control, kinds.MACHINE.resource, NS, resource_version=self.rv,
                           label_selector=self.selector, timeout_seconds=30, read_timeout=40)  # fmt: skip
        for kind, obj in stream:
            self.rv = str(obj["metadata"].get("resourceVersion") or self.rv)
            if kind == "DELETED":
                self.machines.pop(obj["metadata"]["name"], None)
            elif kind in ("ADDED", "MODIFIED"):
                self.machines[obj["metadata"]["name"]] = obj
            self._count()
            if self.stop.is_set():
                return


def rolled(control: ApiClient, selector: str, class_name: str) -> bool:
    found = ops.list_(control, kinds.MACHINE.resource, NS, label_selector=selector)["items"]
    return len(found) == ROLLED and all(
        m["spec"]["class"]["name"] == class_name
        and ((m.get("status") or {}).get("currentStatus") or {}).get("phase") == "Running"
        for m in found
    )


def test_a_rolling_update_of_20_under_lag_stays_within_its_budget(
    sandbox: Sandbox, clients: tuple[ApiClient, ApiClient, redis.Redis]
) -> None:
    """The rollout completes under the lag (its duration is printed: bench/lag.py measures it against
    the rollout without lag) with never more than replicas + maxSurge machines and never fewer than
    replicas available (maxUnavailable 0), and ends with every machine of the new class."""
    control, _, _ = clients
    name, selector = "roll", "pool=roll"
    local_class(control, "lag-b", {"bootDelaySeconds": 0.5}, NS)
    ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, roll_deployment(name, "lag"))
    wait_until(lambda: rolled(control, selector, "lag"), 300, interval=0.5, what=f"{ROLLED} Running")
    census = Census(control, selector)
    census.start()
    start = time.monotonic()
    new_class = {"spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": "lag-b"}}}}}
    ops.patch(control, kinds.MACHINE_DEPLOYMENT.resource, name, new_class, NS)
    try:
        wait_until(lambda: rolled(control, selector, "lag-b"), 900, interval=0.5, what="the rollout done")
    finally:
        census.stop.set()
    print(f"rolling update of {ROLLED} under a {LAG:g}s watch lag: {time.monotonic() - start:.1f}s")
    assert census.most <= ROLLED + SURGE, f"at most {ROLLED + SURGE} machines at once, saw {census.most}"
    assert census.fewest_available >= ROLLED, f"maxUnavailable 0, saw {census.fewest_available} available"

    def settled() -> bool:
        status = ops.get(control, kinds.MACHINE_DEPLOYMENT.resource, name, NS).get("status") or {}
        sets = ops.list_(control, kinds.MACHINE_SET.resource, NS, label_selector=selector)["items"]
        old = [s for s in sets if s["spec"]["template"]["spec"]["class"]["name"] != "lag-b"]
        return (
            status.get("updatedReplicas") == ROLLED
            and status.get("availableReplicas") == ROLLED
            and all(s["spec"].get("replicas", 0) == 0 for s in old)
        )

    wait_until(settled, 60, interval=0.5, what="the deployment's status: all updated and available")
