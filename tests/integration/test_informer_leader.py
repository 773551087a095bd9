"""Leader election of the informer over a Lease in the sandbox: two replicas, one leads; the standby takes
over within the lease duration when the leader is killed; a leader that cannot renew stops its watches."""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes.client import ApiClient

from informers.leader import LEASE_NAME, LeaderElector
from informers.runner import status_key
from informers.sink import routed_list_key
from mcm_sandbox.crds import install_crds
from mcm_sandbox.procs import ApiServer, ManagedProcess, wait_until
from mcm_sandbox.testing import fixtures as fx
from mcm_sandbox.testing.informers import InformerThread, sandbox_settings
from mcm_tasks import kinds
from mcm_tasks.beat_cli import lock_key, read_fires
from mcm_tasks.cache import layout
from mcm_tasks.kube import ops
from mcm_tasks.standby import UPSTREAM_LEASE_DURATION
from tests.integration.informer_support import clear_faults, create, fault

pytestmark = pytest.mark.integration

LEASE, RENEW, RETRY = 3.0, 2.0, 0.3
TIMEOUT = 30.0


@pytest.fixture()
def namespace(kube_api: ApiClient, apiserver: ApiServer) -> str:
    install_crds(kube_api)
    name = f"lead-{uuid.uuid4().hex[:8]}"
    ops.create(
        kube_api,
        kinds.NAMESPACE.resource,
        {"metadata": {"name": name}},
    )
    return name


def holder(api: ApiClient, namespace: str) -> str:
    lease = ops.get(api, kinds.LEASE.resource, LEASE_NAME, namespace, missing_ok=True)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def informer_process(
    identity: str, apiserver: ApiServer, redis_url: str, namespace: str, logs: Path, *extra: str
) -> ManagedProcess:
    env = {
        **os.environ,
        "MCM_CONTROL_KUBECONFIG": str(apiserver.kubeconfig),
        "MCM_TARGET_KUBECONFIG": str(apiserver.kubeconfig),
        "MCM_NAMESPACE": namespace,
        "MCM_REDIS_URL": redis_url,
        "MCM_LEADER_ELECT_LEASE_DURATION": str(LEASE),
        "MCM_LEADER_ELECT_RENEW_DEADLINE": str(RENEW),
        "MCM_LEADER_ELECT_RETRY_PERIOD": str(RETRY),
        "MCM_WATCH_TIMEOUT": "5",
        "MCM_WATCH_CLIENT_TIMEOUT": "8",
    }
    args = [
        sys.executable,
        "-m",
        "mcm_tasks.cli",
        "informer",
        "--identity",
        identity,
        "--sink",
        "list",
        *extra,
    ]
    proc = ManagedProcess(args, logs / f"informer-{identity}.log", env=env)
    proc.start()
    return proc


@pytest.fixture()
def replicas(
    apiserver: ApiServer, redis_url: str, namespace: str, tmp_path: Path
) -> Iterator[dict[str, ManagedProcess]]:
    procs = {name: informer_process(name, apiserver, redis_url, namespace, tmp_path) for name in ("a", "b")}
    yield procs
    for proc in procs.values():
        proc.stop()


def test_the_standby_takes_over_within_the_lease_duration_when_the_leader_is_killed(
    kube_api: ApiClient, replicas: dict[str, ManagedProcess], redis_url: str, namespace: str
) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)

    def mirrored(name: str) -> bool:
        return bool(client.hexists(layout.objects_key(kinds.MACHINE.mirror), f"{namespace}/{name}"))

    wait_until(lambda: holder(kube_api, namespace) in replicas, TIMEOUT, what="a leader")
    leader = holder(kube_api, namespace)
    standby = next(name for name in replicas if name != leader)
    wait_until(
        lambda: client.exists(layout.sentinel_key()) == 1, TIMEOUT, what="the leader's first full list"
    )
    assert client.hget(status_key(leader), "leading") == "1"
    assert not client.exists(status_key(standby)), "the standby neither mirrors nor routes"
    create(kube_api, kinds.MACHINE.resource, fx.machine("before"), namespace)
    wait_until(lambda: mirrored("before"), TIMEOUT, what="mirrored by the leader")

    replicas[leader].kill()
    killed_at = time.monotonic()
    wait_until(lambda: holder(kube_api, namespace) == standby, LEASE + 10, interval=0.05, what="takeover")
    takeover = time.monotonic() - killed_at
    assert takeover <= LEASE + 2 * RETRY + 1.0, f"took {takeover:.2f}s with a {LEASE}s lease"

    create(kube_api, kinds.MACHINE.resource, fx.machine("after"), namespace)
    wait_until(lambda: mirrored("after"), TIMEOUT, what="mirrored by the new leader")
    wait_until(
        lambda: f"machine {namespace}/after" in client.lrange(routed_list_key(), 0, -1),
        TIMEOUT,
        what="routed",
    )
    assert replicas[standby].alive()
    client.close()


def test_a_leader_that_cannot_renew_stops_its_watches_and_leads_again_later(
    kube_api: ApiClient, apiserver: ApiServer, redis_url: str, namespace: str
) -> None:
    settings = sandbox_settings(apiserver.kubeconfig, redis_url, namespace)
    running = InformerThread(settings, identity="solo")
    elector = LeaderElector(running.api, namespace, "solo", LEASE, RENEW, RETRY)
    stop = threading.Event()
    leading = threading.Thread(target=elector.run, args=(running.informer.lead, stop), daemon=True)
    leading.start()
    try:
        wait_until(running.synced, TIMEOUT, what="leading and synced")
        reflectors = list(running.informer.reflectors)
        assert reflectors and all(r.thread.is_alive() for r in reflectors)

        rule = fault(
            apiserver, {"action": "error", "status_code": 503, "verbs": ["update"], "resources": ["leases"]}
        )
        assert rule
        wait_until(
            lambda: not any(r.thread.is_alive() for r in reflectors), RENEW + 10, what="watches stopped"
        )
        assert running.status().get("leading") == "0"

        clear_faults(apiserver)
        wait_until(lambda: running.informer.reflectors != reflectors, TIMEOUT, what="leading again")
        create(kube_api, kinds.MACHINE.resource, fx.machine("later"), namespace)
        wait_until(
            lambda: running.redis.hexists(layout.objects_key(kinds.MACHINE.mirror), f"{namespace}/later"),
            TIMEOUT,
            what="mirroring again",
        )
    finally:
        clear_faults(apiserver)
        stop.set()
        leading.join(15)
        running.close()
    assert holder(kube_api, namespace) == "", "a clean stop releases the lease"


def test_a_valid_leader_renews_with_one_put_and_reads_the_lease_after_someone_else_wrote_it(
    kube_api: ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """client-go's fast path: a leader whose lease is valid as it last wrote it renews with one PUT
    of that object, no GET first; a renewal that meets a Conflict (another writer) reads the lease
    and decides on what it finds."""
    from informers import leader

    verbs: list[str] = []
    real = leader.rest.request

    def counted(api: ApiClient, verb: str, path: str, **kw: Any) -> Any:
        verbs.append(verb)
        return real(api, verb, path, **kw)

    monkeypatch.setattr(leader.rest, "request", counted)
    elector = LeaderElector(kube_api, namespace, "fast", 15.0, 10.0, 2.0)
    assert elector.try_acquire_or_renew()  # acquired: GET (absent), then POST
    verbs.clear()
    for _ in range(3):
        assert elector.try_acquire_or_renew()
    assert verbs == ["PUT"] * 3, "renewals of a valid lease read nothing first"

    # someone else writes the lease (an operator, a standby after a clock jump): a Conflict
    lease = ops.get(kube_api, kinds.LEASE.resource, LEASE_NAME, namespace)
    assert lease is not None
    lease["spec"]["holderIdentity"] = "other"
    ops.update(kube_api, kinds.LEASE.resource, lease, namespace)
    verbs.clear()
    assert not elector.try_acquire_or_renew(), "the other holder's fresh lease is respected"
    assert verbs == ["PUT", "GET"], "the optimistic PUT failed, then the lease was read"
    assert elector.observed is not None and elector.observed.holder == "other"


def test_informers_with_beat_fire_the_jobs_once_and_the_standby_takes_beat_over(
    apiserver: ApiServer, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    """``informer --beat``: beat is a thread of each informer with its own Redis lock; one fires
    the safety jobs, and a SIGKILLed one's beat lock is taken over by the other within a lease,
    which fires the jobs once the fleet acts again."""
    beat_flags = ("--beat", "--machine-safety-overshooting-period=1s")
    procs = {
        name: informer_process(name, apiserver, redis_url, namespace, tmp_path, *beat_flags) for name in "ab"
    }
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:

        def fired(by: str, after: float) -> int:
            entries = read_fires(client)
            return sum(
                1 for f in entries if f.entry == "safety-overshooting" and f.identity == by and f.at > after
            )

        wait_until(lambda: client.get(lock_key()) in procs, TIMEOUT, what="a beat leader")
        first = str(client.get(lock_key()))
        other = next(name for name in procs if name != first)
        since = time.time()
        wait_until(lambda: fired(first, since) >= 2, TIMEOUT, what="the leader's beat firing")
        assert fired(other, 0) == 0, "the standby's beat does not fire"

        procs[first].kill()
        killed_at = time.time()
        wait_until(
            lambda: client.get(lock_key()) == other, LEASE + 10, interval=0.05, what="beat's lock taken over"
        )
        taken = time.time() - killed_at
        assert taken <= LEASE + 2 * RETRY + 1.5, (
            f"beat's lock taken over after {taken:.2f}s with a {LEASE}s lease"
        )
        # the dead replica may also have led the informer and so held upstream's Leases (upstream's
        # 15 s): until they expire the fleet stands by (mcm_tasks.standby) and beat fires nothing
        bound = UPSTREAM_LEASE_DURATION + LEASE + 10
        wait_until(
            lambda: fired(other, killed_at) >= 1, bound, interval=0.05, what="the new beat leader firing"
        )
        assert procs[other].alive()
    finally:
        for proc in procs.values():
            proc.stop()
        client.close()
