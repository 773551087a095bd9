"""A harness for the MachineSet controller's integration tests, and tests of status, events, metrics.

The reconcile runs in-process against the sandbox API server and a real Redis. The cache is fed the
way the informer feeds it (its own Processor, Mirror and routing, expectations included), but only
when a test calls ``sync()``: between two syncs the cache lags, which is exactly what expectations
must survive.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from kubernetes.client import ApiClient
from prometheus_client import CollectorRegistry

from informers.mirror import Mirror
from informers.processor import Processor, Relisted
from informers.sink import deliver
from informers.store import Store
from mcm_sandbox.crds import install_crds
from mcm_sandbox.procs import ApiServer
from mcm_sandbox.testing.standins import finish_deletions
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.controllers.machineset.metrics import register_machine_set_metrics
from mcm_tasks.controllers.machineset.reconcile import ManageReplicasError, reconcile_machine_set
from mcm_tasks.kube import ops
from mcm_tasks.kube.clients import reset_clusters
from mcm_tasks.queue import Requeue, expectations
from mcm_tasks.settings import configure, reset_settings

pytestmark = pytest.mark.integration

HOLD = "example.com/hold"


class ExpectationsSink:
    """The informer's queue sink without Celery: expectations applied, keys only recorded."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def enqueue_many(self, items: list[tuple[str, str]]) -> int:
        self.items.extend(items)
        return len(items)

    def enqueue_batched(self, items: list[tuple[str, str]]) -> int:
        return self.enqueue_many(items)

    def creation_observed(self, owner_key: str, count: int) -> None:
        expectations.creation_observed(owner_key, count)

    def deletion_observed(self, owner_key: str, name: str) -> None:
        expectations.deletion_observed(owner_key, name)


@dataclass
class Harness:
    api: ApiClient
    ns: str
    redis: redis.Redis
    apiserver: ApiServer
    store: Store = field(init=False)
    sink: ExpectationsSink = field(default_factory=ExpectationsSink)

    def __post_init__(self) -> None:
        self.store = Store(self.ns)
        self.processor = Processor(self.store)
        self.mirror = Mirror(self.redis)

    # --- the informer's part ---

    def sync(self) -> None:
        """List MachineSets and Machines and apply them as the informer's re-list does (after the
        machine controller's part, ``finish_deletions``)."""
        finish_deletions(self.api, self.ns)
        items = []
        for kind, res in (
            (kinds.MACHINE_SET.mirror, kinds.MACHINE_SET.resource),
            (kinds.MACHINE.mirror, kinds.MACHINE.resource),
        ):
            listed = ops.list_(self.api, res, self.ns)
            items.append(Relisted(kind, listed["items"], str(listed["metadata"].get("resourceVersion", ""))))
        out = self.processor.process(items)
        self.mirror.write(out.commit)
        deliver(self.sink, out.routing)

    # --- the controller ---

    def key(self, name: str) -> str:
        return f"{self.ns}/{name}"

    def reconcile(self, name: str) -> Requeue | None:
        return reconcile_machine_set(self.key(name))

    def settle(self, name: str, rounds: int = 6) -> None:
        """Sync and reconcile until a pass changes nothing any more (what the queue would do)."""
        for _ in range(rounds):
            self.sync()
            before = self.snapshot()
            self.reconcile(name)
            if self.snapshot() == before:
                return
        raise AssertionError(f"MachineSet {name} did not settle in {rounds} rounds")

    def snapshot(self) -> list[tuple[str, str]]:
        objs = (
            ops.list_(self.api, kinds.MACHINE.resource, self.ns)["items"]
            + ops.list_(self.api, kinds.MACHINE_SET.resource, self.ns)["items"]
        )
        return sorted((o["kind"], o["metadata"]["resourceVersion"]) for o in objs)

    # --- objects ---

    def create_set(
        self,
        name: str,
        replicas: int,
        *,
        labels: dict[str, str] | None = None,
        template_finalizers: list[str] | None = None,
        spec: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        selector = {"app": name}
        template_meta: dict[str, Any] = {"labels": {**selector, "tier": "t"}}
        if template_finalizers:
            template_meta["finalizers"] = template_finalizers
        body = {
            "apiVersion": API_VERSION,
            "kind": "MachineSet",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels or {}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": template_meta,
                    "spec": {"class": {"kind": "MachineClass", "name": "cls"}, **(spec or {})},
                },
            },
        }
        return ops.create(self.api, kinds.MACHINE_SET.resource, body, self.ns)

    def get_set(self, name: str) -> dict[str, Any] | None:
        return ops.get(self.api, kinds.MACHINE_SET.resource, name, self.ns, missing_ok=True)

    def scale(self, name: str, replicas: int) -> None:
        """Through the scale subresource, as kubectl scale and the autoscaler do."""
        ops.patch(
            self.api,
            kinds.MACHINE_SET.resource,
            name,
            {"spec": {"replicas": replicas}},
            self.ns,
            subresource="scale",
        )

    def patch_set(self, name: str, body: dict[str, Any]) -> None:
        ops.patch(self.api, kinds.MACHINE_SET.resource, name, body, self.ns)

    def machines(self, owner: str | None = None) -> list[dict[str, Any]]:
        items = ops.list_(self.api, kinds.MACHINE.resource, self.ns)["items"]
        if owner is None:
            return items
        return [
            m for m in items if any(r.get("name") == owner for r in m["metadata"].get("ownerReferences", []))
        ]

    def active(self, owner: str) -> list[dict[str, Any]]:
        return [m for m in self.machines(owner) if not m["metadata"].get("deletionTimestamp")]

    def create_machine(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        body = {
            "apiVersion": API_VERSION,
            "kind": "Machine",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels},
            "spec": {"class": {"kind": "MachineClass", "name": "cls"}},
        }
        return ops.create(self.api, kinds.MACHINE.resource, body, self.ns)

    def set_phase(self, name: str, phase: str, **last_operation: str) -> None:
        current = ops.get(self.api, kinds.MACHINE.resource, name, self.ns)
        assert current is not None
        current["status"] = {"currentStatus": {"phase": phase}, "lastOperation": last_operation}
        ops.update_status(self.api, kinds.MACHINE.resource, current, self.ns)

    def release_held(self) -> None:
        """What the machine controller does at the end of a deletion: drop the finalizers."""
        for machine in self.machines():
            if machine["metadata"].get("deletionTimestamp") and machine["metadata"].get("finalizers"):
                body = {"metadata": {"finalizers": None}}
                ops.patch(self.api, kinds.MACHINE.resource, machine["metadata"]["name"], body, self.ns)

    def events(self, reason: str) -> list[dict[str, Any]]:
        items = ops.list_(self.api, kinds.EVENT.resource, self.ns)["items"]
        return [e for e in items if e.get("reason") == reason]

    def fault(self, **rule: Any) -> str:
        req = urllib.request.Request(
            f"{self.apiserver.url}/sandbox/faults",
            data=json.dumps(rule).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            return str(json.loads(resp.read())["id"])

    def clear_fault(self, rule_id: str) -> None:
        req = urllib.request.Request(f"{self.apiserver.url}/sandbox/faults/{rule_id}", method="DELETE")
        urllib.request.urlopen(req, timeout=5).close()


@pytest.fixture(scope="module")
def crds(apiserver: ApiServer) -> ApiServer:
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(apiserver.kubeconfig))
    install_crds(api)
    api.close()
    return apiserver


@pytest.fixture()
def harness(crds: ApiServer, kube_api: ApiClient, redis_url: str) -> Iterator[Harness]:
    ns = f"ms-{uuid.uuid4().hex[:8]}"
    ops.create(kube_api, kinds.NAMESPACE.resource, {"metadata": {"name": ns}})
    configure(
        {
            "control_kubeconfig": str(crds.kubeconfig),
            "target_kubeconfig": "none",
            "redis_url": redis_url,
            "namespace": ns,
            "kube_api_qps": 500,
            "kube_api_burst": 500,
        }
    )
    reset_clusters()
    client = redis.Redis.from_url(redis_url)
    try:
        yield Harness(kube_api, ns, client, crds)
    finally:
        client.close()
        reset_clusters()
        reset_settings()


# --- status, events, metrics --------------------------------------------------------------------------------


def test_status_follows_the_machines(harness: Harness) -> None:
    harness.create_set("st", 3)
    harness.settle("st")
    names = [m["metadata"]["name"] for m in harness.machines("st")]
    harness.set_phase(names[0], "Running")
    harness.set_phase(names[1], "Available")
    harness.set_phase(names[2], "Pending", state="Failed", type="Create", description="quota")
    harness.settle("st")
    ms = harness.get_set("st")
    assert ms is not None
    status = ms["status"]
    assert (status["replicas"], status["fullyLabeledReplicas"]) == (3, 3)
    assert (status["readyReplicas"], status["availableReplicas"]) == (1, 2)
    assert status["observedGeneration"] == ms["metadata"]["generation"]
    assert [f["name"] for f in status["failedMachines"]] == [names[2]]
    assert status["failedMachines"][0]["ownerRef"] == "st"
    # nothing changed: no status write (the resourceVersion stays)
    rv = ms["metadata"]["resourceVersion"]
    harness.sync()
    harness.reconcile("st")
    assert harness.get_set("st")["metadata"]["resourceVersion"] == rv  # type: ignore[index]


def test_failed_machines_are_settled_in_the_pass_that_writes_the_status(harness: Harness) -> None:
    """failedMachines is kept until the set is back to all-ready *as its status last said*; the echo of
    a status write does not wake the set (``wakes_machine_set``), so the pass that wrote the new
    replica count settles the list against it instead of leaving a recovered machine listed."""
    harness.create_set("fs", 2)
    harness.settle("fs")
    names = [m["metadata"]["name"] for m in harness.machines("fs")]
    harness.set_phase(names[0], "Running")
    harness.set_phase(names[1], "Pending", state="Failed", type="Create", description="quota")
    harness.settle("fs")
    assert [f["name"] for f in harness.get_set("fs")["status"]["failedMachines"]] == [names[1]]  # type: ignore[index]
    harness.scale("fs", 3)
    harness.sync()
    harness.reconcile("fs")  # creates the third machine; the list stays (not all ready)
    for machine in harness.machines("fs"):
        harness.set_phase(machine["metadata"]["name"], "Running", state="Successful", type="Create")
    harness.sync()
    harness.reconcile("fs")  # one pass: replicas 2 -> 3, all ready
    status = harness.get_set("fs")["status"]  # type: ignore[index]
    assert (status["replicas"], status["readyReplicas"]) == (3, 3)
    assert not status.get("failedMachines")


def test_failed_creation_sets_replica_failure_and_stops_the_slow_start(harness: Harness) -> None:
    harness.create_set("fc", 0)
    harness.settle("fc")
    harness.scale("fc", 10)
    harness.sync()
    rule = harness.fault(action="error", status_code=500, verbs=["create"], resources=["machines"],
                         message="no room", duration_seconds=60)  # fmt: skip
    try:
        with pytest.raises(ManageReplicasError):
            harness.reconcile("fc")
    finally:
        harness.clear_fault(rule)
    assert harness.machines("fc") == []
    failed = harness.events("FailedCreate")
    assert len(failed) == 1  # the slow start tried one machine, not ten
    assert "no room" in failed[0]["message"]
    condition = harness.get_set("fc")["status"]["machineSetCondition"]  # type: ignore[index]
    condition = [c for c in condition if c["type"] == "ReplicaFailure"]  # ScalingUp says the rest
    assert [(c["type"], c["status"], c["reason"]) for c in condition] == [
        ("ReplicaFailure", "True", "FailedCreate")
    ]
    assert "no room" in condition[0]["message"]
    # the refused creation was not left expected: the next pass creates at once, and the condition goes
    assert expectations.satisfied(harness.key("fc"))
    harness.settle("fc")
    assert len(harness.machines("fc")) == 10
    left = harness.get_set("fc")["status"].get("machineSetCondition") or []  # type: ignore[index]
    assert "ReplicaFailure" not in {c["type"] for c in left}
    assert len(harness.events("SuccessfulCreate")) >= 1


def test_failed_deletion_sets_replica_failure_and_lowers_expectations(harness: Harness) -> None:
    harness.create_set("fd", 3)
    harness.settle("fd")
    harness.scale("fd", 1)
    harness.sync()
    rule = harness.fault(action="error", status_code=500, verbs=["delete"], resources=["machines"],
                         message="stuck", duration_seconds=60)  # fmt: skip
    try:
        with pytest.raises(ManageReplicasError):
            harness.reconcile("fd")
    finally:
        harness.clear_fault(rule)
    assert len(harness.machines("fd")) == 3
    # one Event, counted twice (core/v1's count, or events.k8s.io/v1's series)
    assert (
        sum(e.get("count") or (e.get("series") or {}).get("count", 1) for e in harness.events("FailedDelete"))
        == 2
    )
    condition = harness.get_set("fd")["status"]["machineSetCondition"]  # type: ignore[index]
    condition = [c for c in condition if c["type"] == "ReplicaFailure"]  # ScalingDown says the rest
    assert [(c["type"], c["reason"]) for c in condition] == [("ReplicaFailure", "FailedDelete")]
    assert expectations.satisfied(harness.key("fd"))  # the refused deletions are not waited for
    harness.settle("fd")
    assert len(harness.machines("fd")) == 1
    left = harness.get_set("fd")["status"].get("machineSetCondition") or []  # type: ignore[index]
    assert "ReplicaFailure" not in {c["type"] for c in left}


def test_invalid_set_is_skipped_with_an_event(harness: Harness) -> None:
    harness.create_set("bad", 2, spec={"class": {"kind": "MachineClass", "name": ""}})
    assert harness.reconcile("bad") is None
    assert harness.machines() == []
    assert "finalizers" not in harness.get_set("bad")["metadata"]  # type: ignore[index]
    [event] = harness.events("ValidationFailed")
    assert "spec.template.spec.class.name" in event["message"]
    condition = harness.get_set("bad")["status"]["machineSetCondition"]  # type: ignore[index]
    assert [(c["type"], c["status"], c["reason"]) for c in condition] == [
        ("ReplicaFailure", "True", "ValidationFailed")
    ]
    assert "spec.template.spec.class.name" in condition[0]["message"]


def test_metrics_read_from_the_cache(harness: Harness) -> None:
    harness.create_set("mt", 2)
    harness.settle("mt")
    registry = CollectorRegistry()
    register_machine_set_metrics(registry)
    labels = {"name": "mt", "namespace": harness.ns}
    assert registry.get_sample_value("mcm_machine_set_info_spec_replicas", labels) == 2
    assert registry.get_sample_value("mcm_machine_set_status_replicas", labels) == 2
    assert registry.get_sample_value("mcm_machine_set_items_total") == 1
    assert registry.get_sample_value("mcm_machine_stale_machines_total") == 0
