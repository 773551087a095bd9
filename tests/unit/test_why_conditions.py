"""The conditions that say why (pure): a MachineSet's ScalingUp/ScalingDown naming its machines, a
MachineDeployment's RollingOut/ScalingUp/ScalingDown and kstatus' Reconciling/Stalled, and ``put``'s
rule (message kept current, transition time kept while the status holds)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from mcm_tasks.api import (
    Machine,
    MachineDeploymentCondition,
    MachineDeploymentStatus,
    MachineSet,
    MachineSetStatus,
    get_condition,
)
from mcm_tasks.controllers.common.conditions import put
from mcm_tasks.controllers.machinedeployment.conditions import with_why
from mcm_tasks.controllers.machineset.conditions import scaling_conditions
from tests.unit.machinedeployment_support import T0, deployment, machine_set, template

NOW = T0 + timedelta(hours=1)


def machine(name: str, phase: str = "", provider_id: str = "", age: float = 40, deleting: bool = False,
            description: str = "") -> Machine:  # fmt: skip
    created = NOW - timedelta(seconds=age)
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "creationTimestamp": created.isoformat()}
    if deleting:
        meta["deletionTimestamp"] = created.isoformat()
    return Machine.model_validate({
        "metadata": meta, "spec": {"providerID": provider_id},
        "status": {"currentStatus": {"phase": phase}, "lastOperation": {"description": description}},
    })  # fmt: skip


def a_set(replicas: int, ready: int, count: int) -> MachineSet:
    return MachineSet.model_validate({
        "metadata": {"name": "ms", "namespace": "ns"},
        "spec": {"replicas": replicas, "template": template()},
        "status": {"replicas": count, "readyReplicas": ready},
    })  # fmt: skip


def test_a_set_scaling_up_names_its_pending_machines_and_counts_the_missing() -> None:
    ms = a_set(3, 0, 2)
    machines = [machine("ms-x", age=200), machine("ms-y", "Pending", provider_id="p", age=3)]
    status = scaling_conditions(ms, ms.status, machines, NOW)
    up = get_condition(status.conditions, "ScalingUp")
    assert up is not None and (up.status, up.reason) == ("True", "ScalingUp")
    # whole minutes in a condition: its message, and the status, change at most once a minute
    assert up.message == (
        "Scaling up from 0 to 3 running machines; 1 to be created; "
        "2 machines Pending: ms-x (creating VM, 3 min), ms-y (waiting for Node, under 1 min)"
    )
    assert get_condition(status.conditions, "ScalingDown") is None  # only while True, in MCM's list


def test_a_set_scaling_down_names_the_deletion_step() -> None:
    ms = a_set(1, 1, 2)
    machines = [
        machine("keep", "Running"),
        machine("gone", "Running", deleting=True, description="Drain the node"),
    ]
    status = scaling_conditions(ms, ms.status, machines, NOW)
    down = get_condition(status.conditions, "ScalingDown")
    assert down is not None and down.status == "True"
    assert (
        "Scaling down from 2 to 1 machines; 1 machine Running: gone (deleting: Drain the node" in down.message
    )
    assert get_condition(status.conditions, "ScalingUp") is None


def test_put_keeps_the_message_current_and_the_transition_time_while_the_status_holds() -> None:
    first = put(
        [], MachineDeploymentCondition(type="ScalingUp", status="True", reason="ScalingUp", message="a"), T0
    )
    again = put(first, MachineDeploymentCondition(type="ScalingUp", status="True", reason="ScalingUp",
                                                  message="a"), NOW)  # fmt: skip
    assert again == first
    changed = put(first, MachineDeploymentCondition(type="ScalingUp", status="True", reason="ScalingUp",
                                                    message="b"), NOW)  # fmt: skip
    assert (
        changed[0].message == "b"
        and changed[0].last_transition_time == T0
        and changed[0].last_update_time == NOW
    )
    flipped = put(
        changed, MachineDeploymentCondition(type="ScalingUp", status="False", reason="NotScalingUp"), NOW
    )
    assert flipped[0].last_transition_time == NOW


def _status(**fields: Any) -> MachineDeploymentStatus:
    return MachineDeploymentStatus.model_validate(fields)


def test_a_rollout_names_the_old_sets_and_the_new_sets_wait() -> None:
    d = deployment(3, generation=4, tmpl=template("class-v2"))
    scaling = [{"type": "ScalingUp", "status": "True", "reason": "ScalingUp",
                "message": "1 machine Pending: new-x (creating VM, 5 s)"}]  # fmt: skip
    new = machine_set("new", 1, 1, 0, tmpl=template("class-v2"), conditions=scaling)
    old = machine_set("old", 2, 2, 2)
    status = with_why(d, _status(replicas=3, updatedReplicas=1, readyReplicas=2, availableReplicas=2,
                                 observedGeneration=3), [old, new], NOW)  # fmt: skip
    assert status.observed_generation == 4
    rolling = get_condition(status.conditions, "RollingOut")
    assert rolling is not None and rolling.status == "True"
    assert rolling.message == ("Rolling out: 2 machines on old MachineSets old (2); 1/3 updated; "
                               "MachineSet new: 1 machine Pending: new-x (creating VM, 5 s)")  # fmt: skip
    up = get_condition(status.conditions, "ScalingUp")
    assert up is not None and up.status == "True" and "MachineSet new: 1 machine Pending" in up.message
    reconciling = get_condition(status.conditions, "Reconciling")
    assert reconciling is not None and (reconciling.status, reconciling.reason) == ("True", "RollingOut")
    assert get_condition(status.conditions, "Stalled") is None


def test_a_settled_deployment_has_no_kstatus_abnormal_condition() -> None:
    d = deployment(2, generation=2)
    new = machine_set("new", 2, 2, 2)
    available = {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}
    busy = {"type": "Reconciling", "status": "True", "reason": "ScalingUp"}
    status = with_why(d, _status(replicas=2, updatedReplicas=2, readyReplicas=2, availableReplicas=2,
                                 observedGeneration=2, conditions=[available, busy]), [new], NOW)  # fmt: skip
    assert get_condition(status.conditions, "Reconciling") is None
    for type_, reason in (("RollingOut", "NotRollingOut"), ("ScalingUp", "NotScalingUp"),
                          ("ScalingDown", "NotScalingDown")):  # fmt: skip
        found = get_condition(status.conditions, type_)
        assert found is not None and (found.status, found.reason) == ("False", reason)


def test_a_deadline_exceeded_is_stalled() -> None:
    d = deployment(2, generation=2)
    new = machine_set("new", 2, 2, 1)
    progressing = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                   "message": "MachineSet new has timed out progressing."}  # fmt: skip
    status = with_why(d, _status(replicas=2, updatedReplicas=2, readyReplicas=1, observedGeneration=2,
                                 conditions=[progressing]), [new], NOW)  # fmt: skip
    stalled = get_condition(status.conditions, "Stalled")
    assert stalled is not None and (stalled.status, stalled.reason) == ("True", "ProgressDeadlineExceeded")
    assert stalled.message.startswith("MachineSet new has timed out progressing.; Scaling up from 1 to 2")


def test_set_status_is_unchanged_type() -> None:
    ms = a_set(0, 0, 0)
    assert isinstance(scaling_conditions(ms, ms.status, [], NOW), MachineSetStatus)
