"""The MachineSet controller when the API server refuses its writes: a failed creation or deletion
(ReplicaFailure, the FailedCreate/FailedDelete Events, the expectations lowered), on the harness of
machineset_support.py against the sandbox API server, whose fault injection refuses one verb of one
resource while the rest of the pass's requests go through. The rest of the set's status, events and
metrics are tested on the recording fake (tests/unit/test_machineset_status_events.py)."""

from __future__ import annotations

import pytest

from mcm_tasks.controllers.machineset.reconcile import ManageReplicasError
from mcm_tasks.queue import expectations
from tests.integration.machineset_support import Harness

pytestmark = pytest.mark.integration


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
