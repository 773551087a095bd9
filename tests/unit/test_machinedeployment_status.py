"""Status, conditions and the progress deadline; the trigger-deletion annotation; the node decisions
(PreferNoSchedule taint, autoscaler scale-down protection); the metrics."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from mcm_tasks.api import ConditionStatus, MachineDeploymentStatus, MachineSummary
from mcm_tasks.api.constants import (
    CA_SCALE_DOWN_DISABLED_ANNOTATION,
    CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION,
    MACHINE_PRIORITY_ANNOTATION,
    MARKED_FOR_DELETION_TIME_ANNOTATION,
    PREFER_NO_SCHEDULE_KEY,
)
from mcm_tasks.controllers.machinedeployment import progress
from mcm_tasks.controllers.machinedeployment.metrics import machine_deployment_metrics
from mcm_tasks.controllers.machinedeployment.status import calculate_status, status_key
from mcm_tasks.controllers.machinedeployment.taints import (
    add_prefer_no_schedule,
    add_scale_down_protection,
    combined,
    remove_prefer_no_schedule,
    remove_scale_down_protection,
)
from mcm_tasks.controllers.machinedeployment.trigger import Entry, parse_entries, parse_rfc3339, plan_trigger
from tests.unit.machinedeployment_support import T0, deployment, machine_set

NOW = T0 + timedelta(hours=1)


def cond(type_: str, status: str, reason: str, updated: Any = T0) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": "",
        "lastUpdateTime": updated.isoformat(),
        "lastTransitionTime": T0.isoformat(),
    }


# --- status ----------------------------------------------------------------------------------------------


def test_calculate_status_sums_sets() -> None:
    failed = MachineSummary.model_validate(
        {"name": "m1", "lastOperation": {"state": "Failed", "description": "x"}}
    )
    old = machine_set("old", 2, replicas=3, available=2)
    new = machine_set("new", 5, replicas=4, available=3, age=1)
    new = new.model_copy(update={"status": new.status.model_copy(update={"failed_machines": [failed]})})
    d = deployment(7, surge=2, unavailable=1, generation=4)
    status = calculate_status(d, [old, new], new, NOW)
    assert (status.replicas, status.updated_replicas, status.available_replicas, status.ready_replicas) == (
        7,
        4,
        5,
        5,
    )
    assert status.unavailable_replicas == 7 - 5
    assert status.observed_generation == 4
    assert [f.name for f in status.failed_machines] == ["m1"]
    available = progress.get_condition(status.conditions, progress.AVAILABLE)
    assert available is not None and available.status == ConditionStatus.FALSE  # 5 < 7 - 1


def test_available_condition_true_at_minimum_and_unavailable_never_negative() -> None:
    d = deployment(4, surge=1, unavailable=1)
    status = calculate_status(d, [machine_set("new", 3, replicas=5, available=5)], None, NOW)
    found = progress.get_condition(status.conditions, progress.AVAILABLE)
    assert found is not None and (found.status, found.reason) == ("True", progress.MINIMUM_REPLICAS_AVAILABLE)
    assert status.unavailable_replicas == 0


def test_status_key_treats_absent_and_zero_alike() -> None:
    assert status_key(MachineDeploymentStatus()) == status_key(
        MachineDeploymentStatus(replicas=0, failed_machines=[], conditions=[])
    )
    assert status_key(MachineDeploymentStatus()) != status_key(MachineDeploymentStatus(replicas=1))


# --- progress --------------------------------------------------------------------------------------------


def _progress(d_status: dict[str, Any], new_counts: dict[str, int], deadline: int | None = 60) -> Any:
    d = deployment(3, status=d_status, progressDeadlineSeconds=deadline)
    computed = d.status.model_copy(update=new_counts)
    return progress.rollout_conditions(d, d.status, computed, machine_set("new", 3), [], NOW)


def test_progress_complete() -> None:
    status = _progress(
        {"conditions": [cond("Progressing", "True", progress.MACHINE_SET_UPDATED)]},
        {"replicas": 3, "updated_replicas": 3, "available_replicas": 3, "observed_generation": 1},
    )
    found = progress.progressing(status)
    assert found is not None and (found.status, found.reason) == ("True", progress.NEW_MACHINE_SET_AVAILABLE)
    assert found.message == 'MachineSet "new" has successfully progressed.'


def test_progress_seen_refreshes_last_update_time() -> None:
    status = _progress(
        {
            "replicas": 4,
            "updatedReplicas": 1,
            "conditions": [cond("Progressing", "True", progress.MACHINE_SET_UPDATED)],
        },
        {"replicas": 4, "updated_replicas": 2},
    )
    found = progress.progressing(status)
    assert found is not None and found.reason == progress.MACHINE_SET_UPDATED
    assert found.last_update_time == NOW and found.last_transition_time == T0


@pytest.mark.parametrize(
    ("deadline", "reason"),
    [(60, progress.PROGRESS_DEADLINE_EXCEEDED), (7200, "MachineSetUpdated"), (None, "MachineSetUpdated")],
)
def test_progress_deadline(deadline: int | None, reason: str) -> None:
    status = _progress(
        {
            "replicas": 4,
            "updatedReplicas": 1,
            "conditions": [cond("Progressing", "True", progress.MACHINE_SET_UPDATED)],
        },
        {"replicas": 4, "updated_replicas": 1},
        deadline,
    )
    found = progress.progressing(status)
    assert found is not None and found.reason == reason
    if reason == progress.PROGRESS_DEADLINE_EXCEEDED:
        assert found.status == "False"


def test_deadline_check_after() -> None:
    updated = NOW - timedelta(seconds=20)
    d = deployment(
        3,
        progressDeadlineSeconds=60,
        status={"conditions": [cond("Progressing", "True", "MachineSetUpdated", updated)]},
    )
    assert progress.deadline_check_after(d, d.status, NOW) == pytest.approx(41.0)
    assert progress.deadline_check_after(deployment(3), d.status, NOW) is None
    paused = deployment(3, progressDeadlineSeconds=60, paused=True, status=d.status.model_dump(by_alias=True))
    assert progress.deadline_check_after(paused, paused.status, NOW) is None


@pytest.mark.parametrize(
    ("paused", "current", "expected"),
    [
        (True, None, progress.DEPLOYMENT_PAUSED),
        (True, progress.DEPLOYMENT_PAUSED, None),
        (False, progress.DEPLOYMENT_PAUSED, progress.DEPLOYMENT_RESUMED),
        (False, progress.MACHINE_SET_UPDATED, None),
        (True, progress.PROGRESS_DEADLINE_EXCEEDED, None),  # a reported deadline stays reported
    ],
)
def test_paused_condition(paused: bool, current: str | None, expected: str | None) -> None:
    conditions = [] if current is None else [cond("Progressing", "Unknown", current)]
    d = deployment(3, paused=paused, status={"conditions": conditions})
    found = progress.paused_condition(d, NOW)
    assert (found.reason if found else None) == expected
    if found is not None:
        assert found.status == "Unknown"


def test_replica_failure_copied_from_new_set_first_and_removed_when_gone() -> None:
    failure = [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "quota"}]
    other = [{"type": "ReplicaFailure", "status": "True", "reason": "FailedDelete", "message": "x"}]
    new = machine_set("new", 1, conditions=failure)
    old = machine_set("old", 1, conditions=other)
    status = progress.replica_failure(MachineDeploymentStatus(), new, [old, new])
    found = progress.get_condition(status.conditions, progress.REPLICA_FAILURE)
    assert found is not None and (found.reason, found.message) == ("FailedCreate", "quota")
    cleared = progress.replica_failure(status, machine_set("new", 1), [machine_set("old", 1)])
    assert progress.get_condition(cleared.conditions, progress.REPLICA_FAILURE) is None


# --- trigger deletion ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("m1~2024-05-06T07:00:00Z", [("m1", "2024-05-06T07:00:00Z")]),
        (
            "m1~2024-05-06T07:00:00Z,m2~2024-05-06T08:00:00+02:00",
            [("m1", "2024-05-06T07:00:00Z"), ("m2", "2024-05-06T08:00:00+02:00")],
        ),
        ("m1~not-a-time,m2~2024-05-06T07:00:00Z", [("m2", "2024-05-06T07:00:00Z")]),
        ("m1~2024-05-06,m2~2024-05-06T07:00:00", []),  # no time / no zone: not RFC 3339
        ("m1~a~b, ,~2024-05-06T07:00:00Z", []),
        ("m1", [("m1", "2024-01-01T00:00:00Z")]),  # old format: the scaler's time
        ("m1~2024-05-06T07:00:00Z,m1~2024-05-06T09:00:00Z", [("m1", "2024-05-06T07:00:00Z")]),
    ],
)
def test_parse_trigger_entries(value: str, expected: list[tuple[str, str]]) -> None:
    entries = parse_entries(value, "2024-01-01T00:00:00Z")
    assert [(e.machine, e.marked) for e in entries] == expected


def test_parse_rfc3339_with_fraction() -> None:
    assert parse_rfc3339("2024-05-06T07:00:00.123Z") is not None


def _machine(name: str, owner: str = "uid-new", phase: str = "Running", **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "ownerReferences": [{"uid": owner, "controller": True}], **extra}
    return {"metadata": meta, "status": {"currentStatus": {"phase": phase}}}


def test_plan_trigger_marks_live_machines_and_drops_the_rest() -> None:
    t = "2024-05-06T07:00:00Z"
    entries = [Entry(n, t) for n in ("ok", "marked", "missing", "failed", "deleting", "foreign")]
    machines = {
        "ok": _machine("ok"),
        "marked": _machine(
            "marked", annotations={MACHINE_PRIORITY_ANNOTATION: "1", MARKED_FOR_DELETION_TIME_ANNOTATION: "x"}
        ),
        "missing": None,
        "failed": _machine("failed", phase="Failed"),
        "deleting": _machine("deleting", deletionTimestamp=t),
        "foreign": _machine("foreign", owner="uid-other"),
    }
    value = ",".join(str(e) for e in entries)
    plan = plan_trigger(value, entries, machines, {"uid-new", "uid-old"})
    assert plan.annotation == f"ok~{t},marked~{t}"
    assert plan.machine_patches == {
        "ok": {MACHINE_PRIORITY_ANNOTATION: "1", MARKED_FOR_DELETION_TIME_ANNOTATION: t}
    }
    same = plan_trigger(plan.annotation, entries[:2], machines, {"uid-new"})
    assert same.annotation is None
    empty = plan_trigger(f"missing~{t}", [Entry("missing", t)], machines, {"uid-new"})
    assert empty.annotation == ""


# --- nodes -----------------------------------------------------------------------------------------------


def node(
    taints: list[dict[str, str]] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "resourceVersion": "7", "annotations": annotations or {}},
        "spec": {"taints": taints or []},
    }


OTHER = {"key": "other", "value": "x", "effect": "NoSchedule"}
OURS = {"key": PREFER_NO_SCHEDULE_KEY, "value": "True", "effect": "PreferNoSchedule"}


def test_prefer_no_schedule_taint_patches() -> None:
    added = add_prefer_no_schedule(node([OTHER]))
    assert added == {"metadata": {"resourceVersion": "7"}, "spec": {"taints": [OTHER, OURS]}}
    assert add_prefer_no_schedule(node([OURS])) is None
    assert remove_prefer_no_schedule(node([OTHER, OURS])) == {
        "metadata": {"resourceVersion": "7"},
        "spec": {"taints": [OTHER]},
    }
    assert remove_prefer_no_schedule(node([OURS])) == {
        "metadata": {"resourceVersion": "7"},
        "spec": {"taints": None},
    }
    assert remove_prefer_no_schedule(node([OTHER])) is None


def test_scale_down_protection_patches_respect_a_users_annotation() -> None:
    both = {CA_SCALE_DOWN_DISABLED_ANNOTATION: "true", CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION: "true"}
    assert add_scale_down_protection(node()) == {"metadata": {"annotations": both}}
    assert add_scale_down_protection(node(annotations=both)) is None
    users = {CA_SCALE_DOWN_DISABLED_ANNOTATION: "true"}
    assert add_scale_down_protection(node(annotations=users)) is None
    assert remove_scale_down_protection(node(annotations=users)) is None
    assert remove_scale_down_protection(node(annotations=both)) == {
        "metadata": {"annotations": dict.fromkeys(both)}
    }


def test_an_old_nodes_taint_and_protection_go_in_one_write() -> None:
    taint_and_protect = combined(add_prefer_no_schedule, add_scale_down_protection)
    both = {CA_SCALE_DOWN_DISABLED_ANNOTATION: "true", CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION: "true"}
    assert taint_and_protect(node([OTHER])) == {
        "metadata": {"resourceVersion": "7", "annotations": both},
        "spec": {"taints": [OTHER, OURS]},
    }
    assert taint_and_protect(node([OURS])) == {"metadata": {"annotations": both}}
    assert taint_and_protect(node([OURS], annotations=both)) is None


# --- metrics ---------------------------------------------------------------------------------------------


def test_metrics_report_spec_and_status() -> None:
    d = deployment(
        5,
        surge="20%",
        unavailable=1,
        status={
            "replicas": 6,
            "availableReplicas": 4,
            "collisionCount": 2,
            "conditions": [cond("Available", "True", "x")],
        },
    )
    families = {f.name: f for f in machine_deployment_metrics([d])}
    value = {name: fam.samples[0].value for name, fam in families.items() if fam.samples}
    assert value["mcm_machine_deployment_items_total"] == 1
    assert value["mcm_machine_deployment_info_spec_replicas"] == 5
    assert value["mcm_machine_deployment_info_spec_rolling_update_max_surge"] == 1
    assert value["mcm_machine_deployment_info_spec_rolling_update_max_unavailable"] == 1
    assert value["mcm_machine_deployment_status_replicas"] == 6
    assert value["mcm_machine_deployment_status_collision_count"] == 2
    assert families["mcm_machine_deployment_status_condition"].samples[0].labels["condition"] == "Available"
    assert families["mcm_machine_deployment_info"].samples[0].labels["spec_strategy_type"] == "RollingUpdate"
