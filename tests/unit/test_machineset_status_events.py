"""The MachineSet controller's status, events and metrics, on the harness of tests/machineset_support.py
(the reconcile in-process on the recording fake and a real Redis). A creation or deletion the API
server refuses is tested against the sandbox API server's faults (tests/integration/
test_machineset_api_faults.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from mcm_tasks.controllers.machineset.metrics_io import register_machine_set_metrics
from tests.machineset_support import Harness


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
