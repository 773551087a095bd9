"""Status de-duplication and the Events of status changes (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mcm_tasks.api import CurrentStatus, LastOperation, MachineStatus, NodeCondition
from mcm_tasks.controllers.common.status import (
    CONFIGURATION_ERROR_CODE,
    description_similarity,
    is_problem,
    is_status_similar,
    status_events,
)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def status(
    desc: str = "Cloud provider message - quota exceeded (request abc)",
    state: str = "Failed",
    type_: str = "Create",
    code: str = "ResourceExhausted",
    phase: str = "CrashLoopBackOff",
    op_time: datetime = NOW,
    cs_time: datetime = NOW,
    conditions: list[NodeCondition] | None = None,
    lks: str = "",
) -> MachineStatus:
    return MachineStatus(
        last_operation=LastOperation(
            description=desc, state=state, type=type_, error_code=code, last_update_time=op_time
        ),
        current_status=CurrentStatus(phase=phase, last_update_time=cs_time),
        conditions=conditions or [],
        last_known_state=lks,
    )


def test_similarity_of_descriptions() -> None:
    assert description_similarity("", "") == 1.0
    assert description_similarity("abc", "abc") == 1.0
    a = "Cloud provider message - quota exceeded (request 0f3a9c1e)"
    b = "Cloud provider message - quota exceeded (request 77d2b410)"
    assert description_similarity(a, b) >= 0.75
    assert (
        description_similarity("Creating machine on cloud provider", "Machine m1 successfully joined") < 0.75
    )


@pytest.mark.parametrize(
    ("new", "similar"),
    [
        (status(), True),
        (status(op_time=NOW - timedelta(minutes=5), cs_time=NOW - timedelta(minutes=1)), True),
        (status(desc="Cloud provider message - quota exceeded (request xyz)"), True),
        (status(desc="Creating machine on cloud provider"), False),
        (status(state="Processing"), False),
        (status(type_="HealthCheck"), False),
        (status(code="Internal"), False),
        (status(phase="Failed"), False),
        (status(conditions=[NodeCondition(type="Ready", status="True")]), False),
        (status(lks="vm i-1 created"), False),
        (status(op_time=NOW - timedelta(minutes=31)), False),
    ],
)
def test_is_status_similar(new: MachineStatus, similar: bool) -> None:
    assert is_status_similar(new, status(), NOW) is similar


def test_an_old_current_status_forces_a_rewrite() -> None:
    old = status(op_time=NOW - timedelta(hours=1))
    assert not is_status_similar(status(), old, NOW)


def test_heartbeat_only_condition_changes_are_similar() -> None:
    a = [NodeCondition(type="Ready", status="True", last_heartbeat_time=NOW)]
    b = [NodeCondition(type="Ready", status="True", last_heartbeat_time=NOW + timedelta(seconds=10))]
    assert is_status_similar(status(conditions=a), status(conditions=b), NOW)


def test_phase_change_event() -> None:
    old = status(phase="CrashLoopBackOff")
    new = status(desc="Creating machine on cloud provider", state="Processing", phase="Pending", code="")
    [ev] = status_events(old, new)
    assert (ev.type, ev.reason) == ("Normal", "MachinePending")
    assert "CrashLoopBackOff -> Pending" in ev.message and "Creating machine" in ev.message
    rejoined = status(desc="Machine m successfully re-joined the cluster", state="Successful",
                      type_="HealthCheck", phase="Running", code="")  # fmt: skip
    [ev] = status_events(status(phase="Unknown", state="Processing", type_="HealthCheck"), rejoined)
    assert (ev.type, ev.reason) == ("Normal", "MachineRunning")
    assert "Unknown -> Running" in ev.message and "re-joined" in ev.message


def test_a_new_machines_first_pending_and_its_join_record_no_event() -> None:
    """Its VM was created, its node joined: the status, the join-duration annotation, the metrics and
    the set's SuccessfulCreate say it; an Event of each would cost one API write per machine.
    (A behaviour change: before, the join recorded MachineRunning; upstream records no phase Events.)"""
    pending = status(desc="Creating machine on cloud provider", state="Processing", phase="Pending", code="")
    assert status_events(status(phase=""), pending) == []
    joined = status(desc="Machine m successfully joined the cluster", state="Successful", phase="Running",
                    code="")  # fmt: skip
    assert status_events(pending, joined) == []


@pytest.mark.parametrize(
    ("old_phase", "type_"),
    [
        ("Unknown", "HealthCheck"),  # recovery: a re-join
        ("CrashLoopBackOff", "Create"),  # Running straight after a failed create
        ("Failed", "HealthCheck"),
        ("InPlaceUpdateSuccessful", "HealthCheck"),  # Running again after an in-place update
        ("Pending", "HealthCheck"),  # a re-join, not the creation's join
    ],
)
def test_every_other_arrival_in_running_keeps_its_event(old_phase: str, type_: str) -> None:
    new = status(desc="Machine m successfully re-joined the cluster", state="Successful", type_=type_,
                 phase="Running", code="")  # fmt: skip
    [ev] = status_events(status(phase=old_phase, state="Processing"), new)
    assert (ev.type, ev.reason) == ("Normal", "MachineRunning")


@pytest.mark.parametrize("phase", ["Failed", "CrashLoopBackOff", "Unknown"])
def test_bad_phases_are_warnings(phase: str) -> None:
    [ev] = status_events(status(phase="Pending", state="Processing"), status(phase=phase))
    assert ev.type == "Warning" and ev.reason == f"Machine{phase}"


def test_newly_failed_operation_without_phase_change() -> None:
    old = status(desc="Creating machine on cloud provider", state="Processing", phase="Pending")
    new = status(desc="Provider error: boom. Initialize VM Instance", phase="Pending")
    [ev] = status_events(old, new)
    assert (ev.type, ev.reason) == ("Warning", "CreateFailed")


def test_same_failure_again_is_no_event() -> None:
    assert status_events(status(), status()) == []


def test_configuration_problems_have_their_own_reason() -> None:
    new = status(desc="MachineClass c1 not found", code=CONFIGURATION_ERROR_CODE, phase="")
    [ev] = status_events(status(desc="", state="", type_="", code="", phase=""), new)
    assert ev.reason == "ConfigurationError" and ev.message == "MachineClass c1 not found"
    assert is_problem(new.last_operation)
    assert not is_problem(status().last_operation)
