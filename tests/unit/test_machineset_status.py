"""MachineSet status computation and the decision to write it (``machineset.status``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mcm_tasks.api import Machine, MachineSet, dump
from mcm_tasks.controllers.machineset.status import (
    FAILED_CREATE,
    FAILED_DELETE,
    ReplicaFailure,
    calculate_status,
    status_changed,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LATER = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)
TEMPLATE_LABELS = {"app": "a", "tier": "t"}


def machine(name: str, phase: str = "Running", labels: dict[str, str] | None = None, **op: str) -> Machine:
    return Machine.model_validate(
        {
            "metadata": {
                "name": name,
                "labels": TEMPLATE_LABELS if labels is None else labels,
                "ownerReferences": [
                    {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "name": "ms",
                     "uid": "u", "controller": True}
                ],
            },
            "spec": {"providerID": f"local:///{name}"},
            "status": {"currentStatus": {"phase": phase}, "lastOperation": op},
        }
    )  # fmt: skip


def machine_set(replicas: int = 3, generation: int = 2, status: dict[str, Any] | None = None) -> MachineSet:
    return MachineSet.model_validate(
        {
            "metadata": {"name": "ms", "generation": generation},
            "spec": {"replicas": replicas, "template": {"metadata": {"labels": TEMPLATE_LABELS}}},
            "status": status or {},
        }
    )


def test_counts() -> None:
    machines = [
        machine("r1"),
        machine("r2", labels={"app": "a", "tier": "t", "more": "x"}),
        machine("av", "Available"),
        machine("pe", "Pending", labels={"app": "a"}),
        machine("new", ""),
    ]
    status = calculate_status(machine_set(), machines, None, NOW)
    assert status.replicas == 5
    assert status.fully_labeled_replicas == 4
    assert status.ready_replicas == 2
    assert status.available_replicas == 3
    assert status.observed_generation == 2
    assert status.failed_machines == []
    assert status.conditions == []


def test_failed_machines_listed_and_kept_until_all_ready() -> None:
    failed = machine("f", "Failed", state="Failed", type="HealthCheck", description="unhealthy")
    status = calculate_status(machine_set(), [machine("a"), failed], None, NOW)
    assert [f.name for f in status.failed_machines] == ["f"]
    summary = status.failed_machines[0]
    assert (summary.provider_id, summary.owner_ref, summary.last_operation.description) == (
        "local:///f",
        "ms",
        "unhealthy",
    )
    # the failed machine is gone, but not everything is ready yet (ready 1 != old replicas 2): kept
    ms = machine_set(status=dump(status))
    assert [
        f.name
        for f in calculate_status(ms, [machine("a"), machine("p", "Pending")], None, NOW).failed_machines
    ] == ["f"]
    # all ready again: cleared
    cleared = calculate_status(ms, [machine("a"), machine("b")], None, NOW)
    assert cleared.failed_machines == []
    assert status_changed(ms, cleared)


def test_replica_failure_condition_set_kept_and_removed() -> None:
    failure = ReplicaFailure(FAILED_CREATE, "quota exceeded")
    status = calculate_status(machine_set(), [], failure, NOW)
    [cond] = status.conditions
    assert (cond.type, cond.status, cond.reason, cond.message, cond.last_transition_time) == (
        "ReplicaFailure",
        "True",
        FAILED_CREATE,
        "quota exceeded",
        NOW,
    )
    assert dump(status)["machineSetCondition"][0]["type"] == "ReplicaFailure"
    ms = machine_set(status=dump(status))
    # the same failure again: the condition (and its time) stays, nothing to write for it
    again = calculate_status(ms, [], ReplicaFailure(FAILED_CREATE, "quota exceeded"), LATER)
    assert again.conditions[0].last_transition_time == NOW
    # another reason replaces it
    other = calculate_status(ms, [], ReplicaFailure(FAILED_DELETE, "forbidden"), LATER)
    assert [(c.reason, c.message) for c in other.conditions] == [(FAILED_DELETE, "forbidden")]
    # success removes it
    assert calculate_status(ms, [], None, LATER).conditions == []


def test_other_conditions_survive() -> None:
    frozen = {"type": "Frozen", "status": "True", "reason": "OverShootingReplicaCount", "message": "m"}
    ms = machine_set(status={"machineSetCondition": [frozen]})
    status = calculate_status(ms, [], ReplicaFailure(FAILED_CREATE, "x"), NOW)
    assert [c.type for c in status.conditions] == ["Frozen", "ReplicaFailure"]
    assert [c.type for c in calculate_status(ms, [], None, NOW).conditions] == ["Frozen"]


def test_status_changed_only_when_something_managed_changed() -> None:
    machines = [machine("a"), machine("b"), machine("c")]
    status = calculate_status(machine_set(), machines, None, NOW)
    ms = machine_set(status=dump(status))
    assert not status_changed(ms, calculate_status(ms, machines, None, LATER))
    assert status_changed(ms, calculate_status(ms, machines[:2], None, NOW))
    # a new generation must be observed even if the counts are the same
    bumped = machine_set(generation=3, status=dump(status))
    assert status_changed(bumped, calculate_status(bumped, machines, None, NOW))
    # a status that never was written (observedGeneration 0) is written
    assert status_changed(machine_set(replicas=0), calculate_status(machine_set(replicas=0), [], None, NOW))


def test_unmanaged_status_fields_are_kept() -> None:
    ms = machine_set(status={"lastOperation": {"description": "kept"}, "someFutureField": 1})
    status = calculate_status(ms, [], None, NOW)
    wire = dump(status)
    assert wire["lastOperation"] == {"description": "kept", "lastUpdateTime": "2026-03-01T12:00:00Z"}
    assert wire["someFutureField"] == 1


def test_last_operation_time_is_the_computation_time_written_only_with_a_change() -> None:
    """Upstream calculateMachineSetStatus stamps lastOperation.lastUpdateTime; updateMachineSetStatus
    does not write a status whose counts, conditions and failures are unchanged."""
    machines = [machine("a"), machine("b"), machine("c")]
    first = calculate_status(machine_set(), machines, None, NOW)
    assert first.last_operation.last_update_time == NOW
    ms = machine_set(status=dump(first))
    later = calculate_status(ms, machines, None, LATER)
    assert later.last_operation.last_update_time == LATER
    assert not status_changed(ms, later)


def test_min_ready_seconds_does_not_delay_availability() -> None:
    """Upstream isMachineAvailable: Running or Available is available however recently it became so;
    minReadySeconds (Gardener sets 500) is carried, not waited for. Kept on purpose."""
    ms = MachineSet.model_validate(
        {**dump(machine_set()), "spec": {**dump(machine_set())["spec"], "minReadySeconds": 500}}
    )
    just_now = machine("r")
    just_now.status.current_status.last_update_time = NOW
    status = calculate_status(ms, [just_now, machine("av", "Available")], None, NOW)
    assert status.available_replicas == 2 and status.ready_replicas == 1
