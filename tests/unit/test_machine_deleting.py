"""What holds a deleting machine and what it shows (``controllers/machine/deleting.py``): lifecycle
hooks, the ``Deleting`` condition derived from the flow's description, the drain clock that a hook's
hold does not run, and the per-deployment timeouts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_tasks.api import Machine, MachineStatus
from mcm_tasks.api.constants import PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX
from mcm_tasks.controllers.machine import deleting as d
from mcm_tasks.controllers.machine.deletion_steps import Step, step_of_description
from mcm_tasks.controllers.machine.descriptions import (
    DELETE_VOLUME_ATTACHMENTS,
    GET_VM_STATUS,
    INITIATE_DRAIN,
    INITIATE_FINALIZER_REMOVAL,
    INITIATE_NODE_DELETION,
    INITIATE_VM_DELETION,
)
from mcm_tasks.controllers.machine.watches import wakes_machine

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
DELETED = NOW - timedelta(minutes=10)


def machine(
    annotations: dict[str, str] | None = None, conditions: list[dict[str, Any]] | None = None
) -> Machine:
    return Machine.model_validate(
        {
            "metadata": {
                "name": "m",
                "annotations": annotations or {},
                "deletionTimestamp": DELETED.isoformat(),
            },
            "status": {"conditions": conditions or []},
        }
    )


def deleting_condition(reason: str, since: datetime) -> dict[str, Any]:
    return {"type": "Deleting", "status": "True", "reason": reason, "lastTransitionTime": since.isoformat()}


# --- hooks ---------------------------------------------------------------------------------------------


def test_hooks_are_the_annotations_with_the_prefix_named_by_their_owner() -> None:
    m = machine(
        {
            f"{PRE_DRAIN_HOOK_PREFIX}zeta": "",
            f"{PRE_DRAIN_HOOK_PREFIX}alpha": "free text",
            f"{PRE_TERMINATE_HOOK_PREFIX}storage": "",
            "pre-drain.delete.hook.machine.cluster.x-k8s.io/capi": "",  # Cluster API's: not ours
            "other": "",
        }
    )
    assert d.pre_drain_hooks(m) == ["alpha", "zeta"]
    assert d.pre_terminate_hooks(m) == ["storage"]
    assert d.pre_drain_hooks(machine()) == []


@pytest.mark.parametrize(
    ("names", "step"),
    [(["a"], Step.DRAIN), ([f"h{i}" for i in range(9)], Step.DRAIN)],
)
def test_a_hook_wait_keeps_the_flow_at_its_step(names: list[str], step: Step) -> None:
    drain = d.pre_drain_wait(names)
    assert step_of_description(drain) is step
    assert step_of_description(d.pre_terminate_wait(names)) is Step.DELETE_VM
    if len(names) > 5:
        assert drain.endswith("h4 and 4 more. Initiate node drain")


# --- the Deleting condition ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("description", "reason"),
    [
        (GET_VM_STATUS, "GettingVMStatus"),
        (INITIATE_DRAIN, "DrainingNode"),
        ("Drain failed due to - x. Will retry in next sync. Initiate node drain", "DrainingNode"),
        (d.pre_drain_wait(["a"]), "WaitingForPreDrainHook"),
        (f"Force Drain successful. {DELETE_VOLUME_ATTACHMENTS}", "WaitingForVolumeDetach"),
        (f"Drain successful. {INITIATE_VM_DELETION}", "DeletingVM"),
        (d.pre_terminate_wait(["a"]), "WaitingForPreTerminateHook"),
        (f"VM deletion was successful. {INITIATE_NODE_DELETION}", "DeletingNode"),
        (f"Deletion of Node Object is successful. {INITIATE_FINALIZER_REMOVAL}", "RemovingFinalizer"),
        ("something no step knows", "Terminating"),
    ],
)
def test_the_deleting_reason_follows_the_description(description: str, reason: str) -> None:
    assert d.deleting_reason(description) == reason


def status_at(description: str, conditions: list[dict[str, Any]] | None = None) -> MachineStatus:
    return MachineStatus.model_validate(
        {"lastOperation": {"description": description}, "conditions": conditions or []}
    )


def test_the_condition_keeps_its_transition_time_while_its_reason_holds() -> None:
    ready = {"type": "Ready", "status": "True"}
    first = d.with_deleting_condition(status_at(d.pre_drain_wait(["a"]), [ready]), NOW)
    [kept, cond] = first.conditions
    assert kept.type == "Ready"
    assert (cond.type, cond.status, cond.reason) == ("Deleting", "True", "WaitingForPreDrainHook")
    assert cond.message == d.pre_drain_wait(["a"]) and cond.last_transition_time == NOW
    later = NOW + timedelta(minutes=3)
    again = first.model_copy(
        update={
            "last_operation": first.last_operation.model_copy(
                update={"description": d.pre_drain_wait(["a", "b"])}
            )
        }
    )
    [_, same] = d.with_deleting_condition(again, later).conditions
    assert same.last_transition_time == NOW and same.message.endswith("a, b. Initiate node drain")
    moved = again.model_copy(
        update={"last_operation": again.last_operation.model_copy(update={"description": INITIATE_DRAIN})}
    )
    [_, drained] = d.with_deleting_condition(moved, later).conditions
    assert (drained.reason, drained.last_transition_time) == ("DrainingNode", later)


# --- the drain clock -----------------------------------------------------------------------------------


RELEASED = "mcm-tasks.io/pre-drain-hooks-released-at"


@pytest.mark.parametrize(
    ("annotations", "conditions", "start"),
    [
        ({}, [], DELETED),  # upstream: from the deletion
        ({}, [deleting_condition("DrainingNode", NOW - timedelta(minutes=1))], DELETED),  # no hook held it
        # the pass in which the last hook went: the drain begins now
        ({}, [deleting_condition("WaitingForPreDrainHook", DELETED)], NOW),
        # draining after a hold: from the release
        (
            {RELEASED: "2026-11-29T11:59:00Z"},
            [deleting_condition("DrainingNode", NOW)],
            NOW - timedelta(minutes=1),
        ),
        # never before the deletion; an unreadable stamp counts for nothing
        ({RELEASED: "2026-11-29T01:00:00Z"}, [], DELETED),
        ({RELEASED: "yesterday"}, [], DELETED),
    ],
)
def test_the_drain_clock_does_not_run_while_a_hook_holds(
    annotations: dict[str, str], conditions: list[dict[str, Any]], start: datetime
) -> None:
    assert d.drain_clock_start(machine(annotations, conditions), NOW) == start


@pytest.mark.parametrize(
    ("annotations", "reason", "released"),
    [
        ({}, "WaitingForPreDrainHook", True),
        ({f"{PRE_DRAIN_HOOK_PREFIX}x": ""}, "WaitingForPreDrainHook", False),
        ({}, "DrainingNode", False),
    ],
)
def test_released_from_pre_drain_hooks(annotations: dict[str, str], reason: str, released: bool) -> None:
    m = machine(annotations, [deleting_condition(reason, DELETED)])
    assert d.released_from_pre_drain_hooks(m) is released


# --- per-deployment timeouts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "seconds"), [(None, None), ("0", None), ("0s", None), ("10s", 10.0), ("1m30s", 90.0)]
)
def test_timeout_values(raw: str | None, seconds: float | None) -> None:
    assert d.parse_timeout(raw) == seconds


@pytest.mark.parametrize("raw", ["", "-5s", "ten seconds", "1e400", "x" * 5000])
def test_an_invalid_timeout_is_refused_briefly(raw: str) -> None:
    with pytest.raises(ValueError) as err:
        d.parse_timeout(raw)
    assert len(str(err.value)) < 150


@pytest.mark.parametrize(
    ("conditions", "timeout", "out"),
    [
        ([], 5.0, False),  # the step begins now
        ([deleting_condition("DeletingNode", NOW - timedelta(seconds=6))], 5.0, True),
        ([deleting_condition("DeletingNode", NOW - timedelta(seconds=4))], 5.0, False),
        ([deleting_condition("DeletingNode", NOW - timedelta(days=6))], None, False),  # forever
        ([deleting_condition("DeletingVM", NOW - timedelta(seconds=60))], 5.0, False),  # another step
    ],
)
def test_a_step_times_out_from_its_own_start(
    conditions: list[dict[str, Any]], timeout: float | None, out: bool
) -> None:
    assert d.timed_out(machine(conditions=conditions), "DeletingNode", timeout, NOW) is out


# --- the watch -----------------------------------------------------------------------------------------


def obj(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"generation": 1, "annotations": annotations, "deletionTimestamp": "2026-11-29T11:00:00Z"}
    }


@pytest.mark.parametrize(
    ("old", "new", "wakes"),
    [
        ({f"{PRE_DRAIN_HOOK_PREFIX}a": ""}, {}, True),
        ({}, {f"{PRE_TERMINATE_HOOK_PREFIX}a": ""}, True),
        ({f"{PRE_DRAIN_HOOK_PREFIX}a": "x"}, {f"{PRE_DRAIN_HOOK_PREFIX}a": "y"}, True),
        ({"other": "1"}, {"other": "2"}, False),
    ],
)
def test_a_hook_coming_or_going_wakes_the_machine(
    old: dict[str, str], new: dict[str, str], wakes: bool
) -> None:
    assert wakes_machine(obj(old), obj(new)) is wakes
