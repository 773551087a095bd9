"""Seed mode under failure (issue 33): two informer replicas share the namespaces through leases in
Redis (``informers/shards_io.py``), and one SIGKILLed hands its namespaces to the other within the
lease with no change lost; one shoot's API server down freezes that namespace's machine controller
only. Against a sandbox seed of four shoots (``mcm_sandbox/seed.py``), on compressed time."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator

import pytest
import redis
from kubernetes import client

from informers.shards_io import holders
from mcm_sandbox.procs import wait_until
from mcm_sandbox.seed import Seed, machine_deployment, shoot_access
from mcm_tasks import kinds
from mcm_tasks.controllers.common.frozen_io import is_frozen
from mcm_tasks.kube import ops
from mcm_tasks.settings import configure, reset_settings
from mcm_tasks.tenancy import serving
from tests.e2e.support import COMPRESSED, machines_in, running_in

pytestmark = pytest.mark.e2e

SHOOTS = ["shoot-a", "shoot-b", "shoot-c", "shoot-d"]
LEASE = 3.0
RENEW = 0.5
WAIT = 60.0


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seed]:
    env = {
        **COMPRESSED,
        "MCM_SEED_REFRESH_PERIOD": f"{RENEW}s",
        "MCM_LEADER_ELECT_LEASE_DURATION": f"{LEASE}s",
        "MCM_LEADER_ELECT_RENEW_DEADLINE": "2s",
        "MCM_LEADER_ELECT_RETRY_PERIOD": f"{RENEW}s",
        "MCM_MACHINE_SAFETY_APISERVER_STATUSCHECK_PERIOD": "2s",
        "MCM_MACHINE_SAFETY_APISERVER_STATUSCHECK_TIMEOUT": "2s",
        "MCM_MACHINE_SAFETY_ORPHAN_VMS_PERIOD": "0",
    }
    started = Seed(tmp_path_factory.mktemp("seed-shards"), list(SHOOTS), informers=2, env=env).start()
    configure({"redis_url": started.redis_url})
    control = started.control()
    try:
        for shoot in SHOOTS:
            ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, machine_deployment(shoot, "workers", 1))
        for shoot in SHOOTS:
            wait_until(lambda s=shoot: running(control, s) == 1, WAIT, what=f"{shoot} Running")  # type: ignore[misc]
    finally:
        control.close()
    yield started
    reset_settings()
    started.stop()


@pytest.fixture
def control(seed: Seed) -> Iterator[client.ApiClient]:
    api = seed.control()
    yield api
    api.close()


@pytest.fixture
def r(seed: Seed) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(seed.redis_url)
    yield conn
    conn.close()


machines, running = machines_in, running_in


def scale(api: client.ApiClient, namespace: str, replicas: int) -> None:
    ops.patch(api, kinds.MACHINE_DEPLOYMENT.resource, "workers", {"spec": {"replicas": replicas}}, namespace)


def test_both_replicas_run_namespaces_and_each_namespace_has_one(seed: Seed, r: redis.Redis) -> None:
    wait_until(lambda: set(holders(r, "mcm")) == set(SHOOTS), 10, what="every namespace leased")
    held = holders(r, "mcm")
    assert set(held.values()) <= {"informer", "informer-1"}


def test_a_killed_replica_hands_its_namespaces_over_within_the_lease(
    seed: Seed, control: client.ApiClient, r: redis.Redis
) -> None:
    held = holders(r, "mcm")
    counts = {name: list(held.values()).count(name) for name in ("informer", "informer-1")}
    victim = max(counts, key=lambda name: counts[name])  # the one holding more (maybe all)
    survivor = "informer-1" if victim == "informer" else "informer"
    moved = sorted(ns for ns, holder in held.items() if holder == victim)
    seed.procs[victim].kill()
    killed = time.monotonic()
    for namespace in moved:  # changes made while nobody watches the namespace
        scale(control, namespace, 2)

    def handed_over() -> bool:
        now = holders(r, "mcm")
        return all(now.get(ns) == survivor for ns in moved)

    wait_until(handed_over, LEASE + 10, interval=0.1, what=f"{survivor} holding {moved}")
    took = time.monotonic() - killed
    assert took <= LEASE + 2 * RENEW + 2.0, f"handover took {took:.1f}s"
    for namespace in moved:  # nothing lost: the new owner lists and acts on what changed meanwhile
        wait_until(lambda ns=namespace: running(control, ns) == 2, WAIT, what=f"{namespace} scaled to 2")  # type: ignore[misc]


def token(seed: Seed, shoot: str) -> str:
    return shoot_access(seed.shoot_kubeconfig(shoot))[2]


def fail_nodes(seed: Seed, shoot: str) -> str:
    """503 for every Node read of the shoot's API server (the sandbox's fault rules)."""
    assert seed.apiserver is not None
    rule = {"action": "error", "status_code": 503, "verbs": ["get", "list"], "resources": ["nodes"]}
    request = urllib.request.Request(
        f"{seed.apiserver.url}/clusters/{shoot}/sandbox/faults",
        data=json.dumps(rule).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token(seed, shoot)}"},
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        return str(json.loads(resp.read())["id"])


def clear_faults(seed: Seed, shoot: str) -> None:
    assert seed.apiserver is not None
    url = f"{seed.apiserver.url}/clusters/{shoot}/sandbox/faults"
    headers = {"Authorization": f"Bearer {token(seed, shoot)}"}
    urllib.request.urlopen(urllib.request.Request(url, method="DELETE", headers=headers), timeout=5).close()


def frozen(namespace: str) -> bool:
    with serving(namespace):
        return is_frozen()


def test_one_shoot_api_server_down_freezes_only_its_namespace(seed: Seed, control: client.ApiClient) -> None:
    fail_nodes(seed, "shoot-c")
    try:
        wait_until(lambda: frozen("shoot-c"), 30, interval=0.2, what="shoot-c frozen")
        assert not any(frozen(ns) for ns in SHOOTS if ns != "shoot-c")
        before = running(control, "shoot-a")
        scale(control, "shoot-a", before + 1)  # another namespace still acts
        wait_until(lambda: running(control, "shoot-a") == before + 1, WAIT, what="shoot-a scaled")
        assert frozen("shoot-c")
    finally:
        clear_faults(seed, "shoot-c")
    wait_until(lambda: not frozen("shoot-c"), 30, interval=0.2, what="shoot-c thawed")
