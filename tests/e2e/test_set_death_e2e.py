"""A MachineSet pass that dies mid-creation does not stall its set until --expectations-timeout, end
to end in the sandbox with real worker processes: the whole worker running the pass (main process
and pool) is SIGKILLed while its slow-start batches create machines, and the set is next run by a
*different* message (an event after the dead pass's lock expired), not by the dead one's
redelivery; the queue reports the death all the same (one WorkerLost Warning on the set). Go MCM
keeps expectations in memory, so a restarted controller never waits for them; here they outlive
the pass in Redis, and the set must still continue within seconds.

Timeouts are compressed so that each way of coming back is told apart: the dead worker's messages
come back after ``WORKER_LOST`` (later than the bound), the expectations expire after
``EXPECTATIONS_TIMEOUT`` (much later), the dead pass's lock after ``LOCK_TTL``.
"""

from __future__ import annotations

import os
import signal
import time
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
REPLICAS = 10
LOCK_TTL = 8.0
WORKER_LOST = 45.0
EXPECTATIONS_TIMEOUT = 240.0
#: the set has all its machines within this of the kill (lock expiry, the event, a short grace)
CONTINUES_WITHIN = 30.0
ENV = {
    "MCM_RECONCILE_LOCK_TTL": f"{LOCK_TTL:g}s",
    "MCM_WORKER_LOST_TIMEOUT": f"{WORKER_LOST:g}s",
    "MCM_EXPECTATIONS_TIMEOUT": f"{EXPECTATIONS_TIMEOUT:g}s",
}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(Path(tmp_path_factory.mktemp("set-death")), ENV, with_beat=False) as started:
        yield started


@pytest.fixture(scope="module")
def clients(sandbox: Sandbox) -> Iterator[tuple[ApiClient, ApiClient, redis.Redis]]:
    with connected(sandbox) as made:
        local_class(made[0], "death", {"bootDelaySeconds": 0.5}, NS)
        yield made


@pytest.fixture()
def celery(sandbox: Sandbox) -> Iterator[Celery]:
    app = Celery("set-death-e2e", set_as_current=False)
    app.conf.update(celery_config(get_settings().model_copy(update={"redis_url": sandbox.redis_url})))
    try:
        yield app
    finally:
        app.close()


def machines(control: ApiClient, name: str) -> list[dict[str, Any]]:
    return list(ops.list_(control, kinds.MACHINE.resource, NS, label_selector=f"set={name}")["items"])


def set_replicas(control: ApiClient, name: str) -> int:
    found = ops.get(control, kinds.MACHINE_SET.resource, name, NS) or {}
    return int((found.get("status") or {}).get("replicas") or 0)


def lock_of(client: redis.Redis, key: str) -> tuple[float, str] | None:
    """(expiry, holder) of the key's reconcile lock."""
    raw = client.hget(queue_keys("machineset").locks, key)
    if raw is None:
        return None
    expiry, _, holder = raw.decode().split("|", 2)
    return float(expiry), holder


def worker_running(sandbox: Sandbox, celery: Celery, message_id: str) -> int:
    """The pid (process group) of the sandbox worker whose pool runs the message."""
    for node, requests in (celery.control.inspect(timeout=1.0).active() or {}).items():
        if any(r["id"] == message_id for r in requests):
            return sandbox.pids[node.split("@", 1)[0]]
    return 0


def test_a_set_whose_worker_died_mid_creation_continues_after_another_message(
    sandbox: Sandbox, clients: tuple[ApiClient, ApiClient, redis.Redis], celery: Celery
) -> None:
    control, _, client = clients
    name, key = "dying", f"{NS}/dying"
    # 1 s per create: the slow start (1, 2, 4, 3) takes several seconds, the kill lands inside it
    faults(sandbox, {"action": "latency", "latency_ms": 1000, "verbs": ["create"], "resources": ["machines"]})
    try:
        ops.create(control, kinds.MACHINE_SET.resource, machine_set(name, REPLICAS, "death"))
        wait_until(lambda: 0 < len(machines(control, name)) < REPLICAS and lock_of(client, key) is not None,
                   60, interval=0.05, what="the set's first slow-start batch")  # fmt: skip
        found = lock_of(client, key)
        assert found is not None
        pids: list[int] = []

        def running_it(holder: str = found[1]) -> bool:
            pids.append(worker_running(sandbox, celery, holder))
            return pids[-1] > 0

        wait_until(running_it, 10, interval=0.1, what="the worker running the set's pass")
        os.killpg(pids[-1], signal.SIGKILL)  # the whole worker: main process and pool
        killed_at = time.time()
    finally:
        faults(sandbox, None)
    created = len(machines(control, name))
    assert created < REPLICAS, "killed mid-creation"
    # the dead pass's lock expires; an event then runs the set under another message (the informer
    # wakes it on any change beyond its status), long before the dead worker's message comes back
    wait_until(lambda: (lock_of(client, key) or (0.0, ""))[0] < time.time(), LOCK_TTL + 10, interval=0.2,
               what="the dead pass's lock to expire")  # fmt: skip
    ops.patch(control, kinds.MACHINE_SET.resource, name, {"metadata": {"annotations": {"poke": "1"}}}, NS)
    left = CONTINUES_WITHIN - (time.time() - killed_at)
    exp_key = get_settings().key_prefix + ":exp:" + key
    try:
        wait_until(lambda: len(machines(control, name)) == set_replicas(control, name) == REPLICAS,
                   left, interval=0.2, what="the set to continue after the kill")  # fmt: skip
    except TimeoutError as err:
        stuck = {"created at the kill": created, "now": len(machines(control, name)),
                 "expectations": client.hgetall(exp_key), "ttl": client.pttl(exp_key)}  # fmt: skip
        raise AssertionError(f"the set stalled: {stuck}") from err
    # no creation beyond the replicas: every expectation met, the count still right
    wait_until(lambda: int(client.hget(exp_key, "add") or 0) <= 0, 30, interval=0.2,
               what="the set's expectations met")  # fmt: skip
    assert len(machines(control, name)) == REPLICAS, "no machine created twice"
    # the message that took the dead pass's key over reported the death on the set (once)
    lost = [e for e in ops.list_(control, kinds.EVENT.resource, NS)["items"]
            if e.get("type") == "Warning" and (e.get("involvedObject") or {}).get("name") == name
            and "WorkerLost" in str(e.get("message"))]  # fmt: skip
    assert len(lost) == 1 and lost[0].get("count", 1) == 1, lost
    ops.delete(control, kinds.MACHINE_SET.resource, name, NS)
