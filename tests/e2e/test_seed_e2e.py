"""Seed mode end to end (issue 33): one installation (informer with beat, two workers) serving the
shoot namespaces of a sandbox seed, each shoot a virtual cluster of one API-server process whose
Nodes one kubelet simulator plays, each namespace's target cluster found from its Secrets as
gardenlet lays them out (``mcm_sandbox/seed.py``). Namespaces are picked by label
(``--namespace-selector``): a shoot added at run time is served within seconds, one whose label is
taken away stops being watched."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kubernetes import client

from mcm_sandbox.procs import wait_until
from mcm_sandbox.seed import SHOOT_LABEL, Seed, machine_deployment
from mcm_tasks import kinds
from mcm_tasks.kube import ops
from tests.e2e.support import COMPRESSED, machines_in, running_in

pytestmark = pytest.mark.e2e

WAIT = 60.0


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seed]:
    started = Seed(
        tmp_path_factory.mktemp("seed"),
        ["shoot-a", "shoot-b"],
        env={**COMPRESSED, "MCM_SEED_REFRESH_PERIOD": "1s", "MCM_MACHINE_SAFETY_ORPHAN_VMS_PERIOD": "2s"},
    ).start()
    yield started
    started.stop()


@pytest.fixture
def control(seed: Seed) -> Iterator[client.ApiClient]:
    api = seed.control()
    yield api
    api.close()


machines, running = machines_in, running_in


def nodes(seed: Seed, shoot: str) -> set[str]:
    target = seed.target(shoot)
    try:
        listed = ops.list_(target, kinds.NODE.resource).get("items") or []
        return {str(n["metadata"]["name"]) for n in listed}
    finally:
        target.close()


def scale(api: client.ApiClient, namespace: str, name: str, replicas: int) -> None:
    ops.patch(api, kinds.MACHINE_DEPLOYMENT.resource, name, {"spec": {"replicas": replicas}}, namespace)


def test_each_namespace_is_served_on_its_own_target_cluster(seed: Seed, control: client.ApiClient) -> None:
    for shoot in ("shoot-a", "shoot-b"):
        ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, machine_deployment(shoot, "workers", 2))
    for shoot in ("shoot-a", "shoot-b"):
        wait_until(lambda s=shoot: running(control, s) == 2, WAIT, what=f"2 machines Running in {shoot}")  # type: ignore[misc]
    a, b = nodes(seed, "shoot-a"), nodes(seed, "shoot-b")
    assert len(a) == 2 and len(b) == 2 and not a & b
    named = {(m["metadata"].get("labels") or {}).get("node") for m in machines(control, "shoot-a")}
    assert named == a  # shoot-a's machines are the Nodes of shoot-a's cluster
    # each namespace's mirror and queues are its own
    r = redis.Redis.from_url(seed.redis_url)
    try:
        assert r.hlen("mcm:seed:namespaces") == 2
        # each entry carries the target Secrets' versions the workers follow (no Secret content)
        for raw in r.hvals("mcm:seed:namespaces"):
            entry = json.loads(raw)
            assert [type(v) for v in entry["versions"]] == [str, str] and "token" not in raw.decode()
        assert any(r.scan_iter(match="mcm:ns:shoot-a:*", count=1000))
        assert any(r.scan_iter(match="mcm:ns:shoot-b:*", count=1000))
    finally:
        r.close()


def test_a_namespace_added_at_run_time_is_served_within_seconds(
    seed: Seed, control: client.ApiClient
) -> None:
    seed.add_shoot("shoot-c")
    started = time.monotonic()
    ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, machine_deployment("shoot-c", "workers", 1))
    wait_until(lambda: len(machines(control, "shoot-c")) == 1, 10, what="shoot-c's machine within 10 s")
    assert time.monotonic() - started <= 10
    wait_until(lambda: running(control, "shoot-c") == 1, WAIT, what="shoot-c's machine Running")
    assert len(nodes(seed, "shoot-c")) == 1


def test_a_namespace_no_longer_selected_is_not_watched(seed: Seed, control: client.ApiClient) -> None:
    core = client.CoreV1Api(control)
    core.patch_namespace("shoot-c", {"metadata": {"labels": {SHOOT_LABEL: None}}})
    r = redis.Redis.from_url(seed.redis_url)
    try:
        wait_until(lambda: not r.hexists("mcm:seed:namespaces", "shoot-c"), 10, what="shoot-c unregistered")
    finally:
        r.close()
    log = Path(seed.procs["informer"].log_path)
    wait_until(lambda: "namespace shoot-c: informer stopped" in log.read_text(errors="replace"), 10,
               what="shoot-c's informer stopped")  # fmt: skip
    # a change in shoot-c is no longer acted on, while one in shoot-a still is
    scale(control, "shoot-c", "workers", 2)
    scale(control, "shoot-a", "workers", 3)
    wait_until(lambda: running(control, "shoot-a") == 3, WAIT, what="shoot-a scaled to 3")
    assert len(machines(control, "shoot-c")) == 1
