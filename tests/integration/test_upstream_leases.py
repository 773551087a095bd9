"""Upstream's Leases during a swap, against the sandbox API server and a real Redis: while another
holder (a Go MCM) renews ``machine-controller-manager``, our leading informer does not act and the
standby marker names the holder; keepers publish no delayed key and beat fires no safety job; once
the holder stops renewing, ours takes both Leases and acts; a takeover stops the acting."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from kubernetes.client import ApiClient
from prometheus_client import REGISTRY

from informers.upstream import UpstreamLeases
from mcm_sandbox.procs import wait_until
from mcm_tasks import kinds, standby
from mcm_tasks.kube import ops
from mcm_tasks.standby import Standby
from tests.integration.leases_support import Rival

pytestmark = pytest.mark.integration


@pytest.fixture()
def namespace(kube_api: ApiClient) -> str:
    name = f"swap-{uuid.uuid4().hex[:8]}"
    ops.create(kube_api, kinds.NAMESPACE.resource, {"metadata": {"name": name}})
    return name


@pytest.fixture()
def leases(kube_api: ApiClient, namespace: str, redis_client: redis.Redis) -> Iterator[UpstreamLeases]:
    yield UpstreamLeases(kube_api, namespace, "ours", redis_client, retry_period=0.3, renew_deadline=2.0)


def test_ours_stand_by_while_a_go_mcm_holds_its_lease_then_act(
    kube_api: ApiClient, namespace: str, leases: UpstreamLeases, redis_client: redis.Redis
) -> None:
    acting: list[threading.Event] = []
    leading = threading.Event()

    def act(event: threading.Event) -> None:
        acting.append(event)
        event.wait()

    with Rival(kube_api, namespace, "machine-controller-manager"):
        runner = threading.Thread(target=leases.run, args=(act, leading), daemon=True)
        runner.start()
        wait_until(lambda: standby.read(redis_client) is not None, 10, what="the standby marker")
        held = standby.read(redis_client)
        assert held is not None and (held.lease, held.holder) == (
            f"{namespace}/machine-controller-manager",
            "go-mcm",
        )
        time.sleep(1.0)  # a second of standing by: ours must not act during it
        assert not acting
        assert (
            REGISTRY.get_sample_value("mcm_upstream_lease_standby", {"lease": "machine-controller-manager"})
            == 1
        )
    stopped = time.monotonic()
    wait_until(lambda: bool(acting), 10, what="ours acting after the holder stopped renewing")
    assert time.monotonic() - stopped >= 1.0  # not before the rival's 2 s lease ran out
    assert standby.read(redis_client) is None
    assert (
        REGISTRY.get_sample_value("mcm_upstream_lease_standby", {"lease": "machine-controller-manager"}) == 0
    )
    for name in ("machine-controller-manager", "machine-controller"):
        lease = ops.get(kube_api, kinds.LEASE.resource, name, namespace)
        assert lease["spec"]["holderIdentity"] == "ours"
        assert lease["spec"]["leaseDurationSeconds"] == 15  # upstream's timing, whatever ours are

    # a Go MCM taking the Lease over (ours not yet expired: it writes over it) stops the acting
    rival = Rival(kube_api, namespace, "machine-controller", duration=15)
    with rival:
        wait_until(lambda: acting[0].is_set(), 10, what="acting stopped on the takeover")
        wait_until(lambda: standby.read(redis_client) is not None, 10, what="the standby marker again")
        leading.set()
    runner.join(10)
    assert not runner.is_alive()


def test_keepers_and_beat_do_nothing_while_standing_by(redis_url: str, redis_client: redis.Redis) -> None:
    """The marker holds back a keeper's publishing of due keys and beat's safety jobs."""
    from mcm_tasks.queue import state
    from mcm_tasks.queue.keeper import Keeper
    from mcm_tasks.queue.producer import enqueue_after
    from mcm_tasks.settings import configure, reset_settings

    settings = configure({"redis_url": redis_url})
    try:
        standby.mark(redis_client, Standby("ns/machine-controller-manager", "go-mcm", time.time(), "test"))
        enqueue_after("machine", "ns/m1", 0.2)
        keeper = Keeper("w1", settings)
        keeper.start()
        try:
            wait_until(lambda: keeper.standing_by is not None, 10, what="the keeper standing by")
            time.sleep(0.5)
            assert keeper.published == 0 and [d.key for d in state.delayed("machine")] == ["ns/m1"]
            standby.clear(redis_client)
            wait_until(lambda: keeper.published == 1, 10, what="published once the standby is over")
        finally:
            keeper.stop()
    finally:
        reset_settings()


def test_beat_fires_no_safety_job_while_standing_by(redis_url: str, redis_client: redis.Redis) -> None:
    from mcm_tasks.beat_cli import SafetyScheduler, beat_config, read_fires
    from mcm_tasks.celery_app import app as celery
    from mcm_tasks.celery_app import apply_settings
    from mcm_tasks.redisdb import get_redis
    from mcm_tasks.settings import configure, get_settings, reset_settings

    configure(
        {"redis_url": redis_url, "leader_elect_retry_period": 0.05, "machine_safety_overshooting_period": 0.5}
    )
    scheduler: SafetyScheduler | None = None
    try:
        standby.mark(redis_client, Standby("ns/machine-controller-manager", "go-mcm", time.time(), "test"))
        apply_settings(get_settings())
        celery.conf.update(beat_config(get_settings(), "standing-by"))
        scheduler = SafetyScheduler(app=celery, max_interval=0.05)
        client = get_redis()
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:  # leads, and would fire every job at once and every 0.5 s
            scheduler.tick()
            time.sleep(0.05)
        assert read_fires(client) == []
        standby.clear(redis_client)

        def fired() -> bool:
            scheduler.tick()
            return bool(read_fires(client))

        wait_until(fired, 10, interval=0.05, what="a safety job once the standby is over")
    finally:
        if scheduler is not None:
            scheduler.close()
        reset_settings()


def test_admin_queues_says_who_holds_the_lease(redis_url: str, redis_client: redis.Redis) -> None:
    import os
    import subprocess
    import sys

    standby.mark(
        redis_client, Standby("shoot--p--s/machine-controller-manager", "go-mcm-7f9", time.time(), "inf-1")
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCM_")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "mcm_tasks.cli", "admin", "--redis-url", redis_url, "queues", *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True)

    said = "standing by: Lease shoot--p--s/machine-controller-manager is held by 'go-mcm-7f9'"
    table = run()
    assert said in table.stdout.splitlines()[0]
    as_json = run("-o", "json")
    assert isinstance(json.loads(as_json.stdout), list) and said in as_json.stderr
    standby.clear(redis_client)
    assert "standing by" not in run().stdout


def test_a_message_already_queued_is_handed_back_unrun_while_standing_by(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """BEGIN reads the marker (no round trip of its own): a delivery hands its key back to the
    delayed set, where it waits for the standby's end."""
    from mcm_tasks.queue import enqueue, register_reconciler, registry, state
    from mcm_tasks.queue.messages import queue_keys
    from mcm_tasks.queue.processing import process
    from mcm_tasks.settings import configure, reset_settings

    configure({"redis_url": redis_url})
    try:
        assert queue_keys("machine").standby == standby.marker_key()
        registry.unregister_all()
        registry.load_reconciler_modules([])  # only the reconciler below
        calls: list[str] = []
        register_reconciler("machine", calls.append)
        standby.mark(redis_client, Standby("ns/machine-controller-manager", "go-mcm", time.time(), "test"))
        enqueue("machine", "ns/m1")
        raw = redis_client.lpop(queue_keys("machine").broker_list)
        message = json.loads(raw)
        assert process("machine", "ns/m1", message["headers"]["id"]) == "standby"
        assert calls == [] and [d.key for d in state.delayed("machine")] == ["ns/m1"]
        standby.clear(redis_client)
        enqueue("machine", "ns/m2")
        raw = redis_client.lpop(queue_keys("machine").broker_list)
        assert process("machine", "ns/m2", json.loads(raw)["headers"]["id"]) == "run"
        assert calls == ["ns/m2"]
    finally:
        registry.unregister_all()
        reset_settings()


def test_a_new_leader_that_watched_upstreams_leases_takes_a_dead_leaders_at_once(
    kube_api: ApiClient, namespace: str, redis_client: redis.Redis
) -> None:
    """Our informer failing over: its successor watched upstream's Leases while it waited for
    ours (``observe_all``), so it does not wait another whole upstream lease once it leads."""
    dead = Rival(kube_api, namespace, "machine-controller-manager", duration=2)
    dead.write()  # a leader SIGKILLed right after renewing: never renews again
    successor = UpstreamLeases(kube_api, namespace, "ours", redis_client, retry_period=0.2)
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:  # waiting for our own Lease, watching upstream's
        successor.observe_all()
        time.sleep(0.2)
    acting: list[float] = []
    leading = threading.Event()

    def act(event: threading.Event) -> None:
        acting.append(time.monotonic())
        leading.set()

    began = time.monotonic()
    successor.run(act, leading)
    assert acting and acting[0] - began < 1.0, "took the expired Lease at once"
