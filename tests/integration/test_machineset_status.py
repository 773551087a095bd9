"""The MachineSet controller's status, events and metrics, on the harness of machineset_support.py
(the reconcile in-process against the sandbox API server and a real Redis)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from mcm_tasks.controllers.machineset.metrics_io import register_machine_set_metrics
from mcm_tasks.controllers.machineset.reconcile import ManageReplicasError
from mcm_tasks.queue import expectations
from tests.integration.machineset_support import Harness

pytestmark = pytest.mark.integration


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
