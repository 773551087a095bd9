"""The deletion flow's step machine over lastOperation.description, and each step's answer → next
description, state and retry (deletion), as tables."""

# ruff: noqa: E501 - the tables read best one case per line

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mcm_tasks.api import Machine, MachineState
from mcm_tasks.controllers.machine import deletion_io as d
from mcm_tasks.controllers.machine import deletion_steps as steps
from mcm_tasks.controllers.machine import descriptions
from mcm_tasks.controllers.machine.drain.outcome import DrainResult, Outcome
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import configure, reset_settings
from providers.errors import Code, MachineError


@pytest.fixture(autouse=True)
def _settings() -> Iterator[None]:
    configure({"short_retry": "5s", "medium_retry": "3m", "long_retry": "10m", "conflict_retry": "0.2s"})
    yield
    reset_settings()


def machine(phase: str, description: str) -> Machine:
    return Machine.model_validate(
        {
            "metadata": {"name": "m", "namespace": "default"},
            "status": {"currentStatus": {"phase": phase}, "lastOperation": {"description": description}},
        }
    )


@pytest.mark.parametrize(
    ("phase", "description", "step"),
    [
        ("Running", descriptions.INITIATE_DRAIN, steps.Step.SET_TERMINATING),  # not Terminating yet: step 1 whatever it says
        ("", "", steps.Step.SET_TERMINATING),
        ("Failed", "Drain successful. Initiate VM deletion", steps.Step.SET_TERMINATING),
        ("Terminating", descriptions.GET_VM_STATUS, steps.Step.GET_VM_STATUS),
        ("Terminating", "Error occurred while getting VM status - x. " + descriptions.GET_VM_STATUS, steps.Step.GET_VM_STATUS),
        ("Terminating", descriptions.INITIATE_DRAIN, steps.Step.DRAIN),
        ("Terminating", "Drain failed due to - x. Will retry in next sync. Initiate node drain", steps.Step.DRAIN),
        ("Terminating", "Force Drain successful. Delete Volume Attachments", steps.Step.DELETE_VOLUME_ATTACHMENTS),
        ("Terminating", "Drain failed due to - x. However, since it's a force deletion shall continue deletion of "
         "VM. Delete Volume Attachments", steps.Step.DELETE_VOLUME_ATTACHMENTS),
        ("Terminating", "Drain successful. Initiate VM deletion", steps.Step.DELETE_VM),
        ("Terminating", "Skipping drain as nodeName is not a valid one for machine. Initiate VM deletion",
         steps.Step.DELETE_VM),
        ("Terminating", "No Live VolumeAttachments for node: n. Moving to VM Deletion. Initiate VM deletion",
         steps.Step.DELETE_VM),
        ("Terminating", "VM deletion was successful. Initiate node object deletion", steps.Step.DELETE_NODE),
        ("Terminating", "VM not found. Continuing deletion flow. Initiate node object deletion", steps.Step.DELETE_NODE),
        ("Terminating", 'Deletion of Node Object "n" is successful. Initiate machine object finalizer removal',
         steps.Step.REMOVE_FINALIZER),
        ("Terminating", "something nobody wrote", steps.Step.SET_TERMINATING),  # unrecognised: start over
        ("Terminating", "", steps.Step.SET_TERMINATING),
        ("Terminating", "initiate node drain", steps.Step.SET_TERMINATING),  # case matters, as upstream
    ],
)  # fmt: skip
def test_step_of(phase: str, description: str, step: steps.Step) -> None:
    assert steps.step_of(machine(phase, description)) is step


def test_earlier_steps_win_when_a_description_names_two() -> None:
    # MCM checks by substring in a fixed order; a driver message quoting a later step does not skip ahead
    text = f"Error occurred while getting VM status - {descriptions.INITIATE_VM_DELETION}. {descriptions.GET_VM_STATUS}"
    assert steps.step_of_description(text) is steps.Step.GET_VM_STATUS


def err(code: Code) -> MachineError:
    return MachineError(code, "cloud said no")


@pytest.mark.parametrize(
    ("error", "step", "state", "retry"),
    [
        (None, steps.Step.DRAIN, MachineState.PROCESSING, steps.Retry.NEXT_STEP),
        (err(Code.NotFound), steps.Step.DRAIN, MachineState.PROCESSING, steps.Retry.NEXT_STEP),
        (err(Code.Unimplemented), steps.Step.DRAIN, MachineState.PROCESSING, steps.Retry.NEXT_STEP),
        (err(Code.Uninitialized), steps.Step.DRAIN, MachineState.PROCESSING, steps.Retry.NEXT_STEP),
        (err(Code.Unknown), steps.Step.GET_VM_STATUS, MachineState.FAILED, steps.Retry.SHORT),
        (err(Code.DeadlineExceeded), steps.Step.GET_VM_STATUS, MachineState.FAILED, steps.Retry.SHORT),
        (err(Code.Aborted), steps.Step.GET_VM_STATUS, MachineState.FAILED, steps.Retry.SHORT),
        (err(Code.Unavailable), steps.Step.GET_VM_STATUS, MachineState.FAILED, steps.Retry.SHORT),
        (err(Code.Internal), steps.Step.GET_VM_STATUS, MachineState.FAILED, steps.Retry.MEDIUM),
        (err(Code.OutOfRange), steps.Step.GET_VM_STATUS, MachineState.FAILED, steps.Retry.MEDIUM),
        (err(Code.PermissionDenied), steps.Step.GET_VM_STATUS, MachineState.FAILED, steps.Retry.MEDIUM),
        (RuntimeError("boom"), steps.Step.GET_VM_STATUS, MachineState.FAILED, steps.Retry.MEDIUM),  # Internal
    ],
)
def test_vm_status_transition(
    error: Exception | None, step: steps.Step, state: MachineState, retry: steps.Retry
) -> None:
    found = steps.vm_status_transition(error)
    assert steps.step_of_description(found.description) is step
    assert (found.state, found.retry) == (state, retry)
    if error is not None and step is steps.Step.GET_VM_STATUS:
        assert str(error) in found.description


@pytest.mark.parametrize(
    ("error", "text"),
    [
        pytest.param(None, "Initiate node drain", id="Checking existance of VM at provider successfully"),
        pytest.param(err(Code.Unimplemented), "Initiate node drain", id="GetMachineStatus Unimplemented: try to drain and delete"),
        pytest.param(err(Code.NotFound), "VM was not found at provider. Moving forward to node drain. Initiate node drain",
                     id="NotFound: drain on, so DeleteMachine removes the VM's orphan NICs and disks"),
        pytest.param(err(Code.Uninitialized), "VM instance was not initialized. Moving forward to node drain. Initiate node drain",
                     id="Uninitialized: on to the drain"),
    ],
)  # fmt: skip
def test_vm_status_words_are_upstreams(error: Exception | None, text: str) -> None:
    """Upstream ``updateMachineStatusAndNodeLabel``: a VM the provider does not have is not taken
    straight to node deletion (the seeds' older flow) but through the drain and DeleteMachine."""
    found = steps.vm_status_transition(error)
    assert (found.description, found.state, found.retry) == (
        text,
        MachineState.PROCESSING,
        steps.Retry.NEXT_STEP,
    )
    assert steps.step_of_description(found.description) is steps.Step.DRAIN


@pytest.mark.parametrize(
    ("error", "step", "state", "retry", "text"),
    [
        (None, steps.Step.DELETE_NODE, MachineState.PROCESSING, steps.Retry.NEXT_STEP,
         "VM deletion was successful. Initiate node object deletion"),
        (err(Code.NotFound), steps.Step.DELETE_NODE, MachineState.PROCESSING, steps.Retry.NEXT_STEP,
         "VM not found. Continuing deletion flow. Initiate node object deletion"),
        (err(Code.Unavailable), steps.Step.DELETE_VM, MachineState.FAILED, steps.Retry.SHORT,
         "VM deletion failed due to - machine codes error: code = [Unavailable] message = [cloud said no]. "
         "However, will re-try in the next resync. Initiate VM deletion"),
        (err(Code.Unknown), steps.Step.DELETE_VM, MachineState.FAILED, steps.Retry.SHORT, None),
        (err(Code.DeadlineExceeded), steps.Step.DELETE_VM, MachineState.FAILED, steps.Retry.SHORT, None),
        (err(Code.Aborted), steps.Step.DELETE_VM, MachineState.FAILED, steps.Retry.SHORT, None),
        (err(Code.InvalidArgument), steps.Step.DELETE_VM, MachineState.FAILED, steps.Retry.LONG,
         "VM deletion failed due to - machine codes error: code = [InvalidArgument] message = [cloud said no]. "
         "Aborting operation. Initiate VM deletion"),
        (err(Code.Internal), steps.Step.DELETE_VM, MachineState.FAILED, steps.Retry.LONG, None),
        (ValueError("bug"), steps.Step.DELETE_VM, MachineState.FAILED, steps.Retry.LONG, None),
    ],
)  # fmt: skip
def test_delete_vm_transition(
    error: Exception | None, step: steps.Step, state: MachineState, retry: steps.Retry, text: str | None
) -> None:
    found = steps.delete_vm_transition(error)
    assert steps.step_of_description(found.description) is step
    assert (found.state, found.retry) == (state, retry)
    if text is not None:
        assert found.description == text


@pytest.mark.parametrize(
    ("result", "text", "state", "retry"),
    [
        (DrainResult(Outcome.SUCCEEDED), "Drain successful. Initiate VM deletion", MachineState.PROCESSING,
         steps.Retry.NEXT_STEP),
        (DrainResult(Outcome.SUCCEEDED, forced=True), "Force Drain successful. Delete Volume Attachments",
         MachineState.PROCESSING, steps.Retry.NEXT_STEP),
        (DrainResult(Outcome.FAILED, forced=True, errors=["e1", "e2"]),
         "Drain failed due to - e1; e2. However, since it's a force deletion shall continue deletion of VM. "
         "Delete Volume Attachments", MachineState.PROCESSING, steps.Retry.NEXT_STEP),
        (DrainResult(Outcome.FAILED, errors=["pdb misconfigured"]),
         "Drain failed due to - pdb misconfigured. Will retry in next sync. Initiate node drain",
         MachineState.FAILED, steps.Retry.SHORT),
        (DrainResult(Outcome.CONDITION_FAILED, errors=["500"]),
         "Drain failed due to failure in update of node conditions - 500. Will retry in next sync. "
         "Initiate node drain", MachineState.FAILED, steps.Retry.SHORT),
        (DrainResult(Outcome.SKIPPED),
         "Skipping drain as nodeName is not a valid one for machine. Initiate VM deletion",
         MachineState.PROCESSING, steps.Retry.NEXT_STEP),
    ],
)  # fmt: skip
def test_drain_transition(result: DrainResult, text: str, state: MachineState, retry: steps.Retry) -> None:
    found = steps.drain_transition(result)
    assert found is not None
    assert (found.description, found.state, found.retry) == (text, state, retry)


def test_a_waiting_drain_writes_nothing() -> None:
    assert steps.drain_transition(DrainResult(Outcome.WAITING, wake_in=3.0)) is None


@pytest.mark.parametrize(
    ("retry", "after"),
    [
        (steps.Retry.NEXT_STEP, 0.2),
        (steps.Retry.SHORT, 5.0),
        (steps.Retry.MEDIUM, 180.0),
        (steps.Retry.LONG, 600.0),
    ],
)
def test_requeue(retry: steps.Retry, after: float) -> None:
    assert d.requeue(retry) == Requeue(after=after)


def test_every_step_description_leads_where_mcm_says() -> None:
    chain: list[tuple[str, Any]] = [
        (descriptions.GET_VM_STATUS, steps.Step.GET_VM_STATUS),
        (descriptions.INITIATE_DRAIN, steps.Step.DRAIN),
        (descriptions.DELETE_VOLUME_ATTACHMENTS, steps.Step.DELETE_VOLUME_ATTACHMENTS),
        (descriptions.INITIATE_VM_DELETION, steps.Step.DELETE_VM),
        (descriptions.INITIATE_NODE_DELETION, steps.Step.DELETE_NODE),
        (descriptions.INITIATE_FINALIZER_REMOVAL, steps.Step.REMOVE_FINALIZER),
    ]
    for text, step in chain:
        assert steps.step_of_description(text) is step


@pytest.mark.parametrize("error", [None, err(Code.NotFound), err(Code.Unimplemented)])
def test_without_target_cluster_the_vm_status_step_goes_straight_to_vm_deletion(
    error: Exception | None,
) -> None:
    """Upstream's no-target mode: no "Initiate node drain" and no separate skip step."""
    found = steps.vm_status_transition(error, target_mode=False)
    assert found.description == (
        "Running without target cluster, skipping node drain and volume attachment deletion. "
        "Initiate VM deletion"
    )
    assert steps.step_of_description(found.description) is steps.Step.DELETE_VM
    assert found.retry is steps.Retry.NEXT_STEP


def test_names_are_quoted_as_go_quotes_them() -> None:
    assert steps.go_q("n-1") == '"n-1"'
    assert steps.go_q('a"b') == '"a\\"b"'
