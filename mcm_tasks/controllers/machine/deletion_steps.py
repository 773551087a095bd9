"""The deletion flow's pure half: which step a Machine's ``status.lastOperation.description`` asks
for (upstream ``triggerDeletionFlow`` matches MCM's description constants by substring, in order), and
the transition each step's outcome makes (upstream ``getVMStatus``, ``drainNode``, ``deleteVM``: the
description, the state and the retry period they write). ``deletion_io.py`` runs the steps and
``deletion.py`` writes what these decide.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from mcm_tasks.api import Machine, MachinePhase, MachineState
from mcm_tasks.controllers.machine.descriptions import (
    DELETE_VOLUME_ATTACHMENTS,
    GET_VM_STATUS,
    INITIATE_DRAIN,
    INITIATE_FINALIZER_REMOVAL,
    INITIATE_NODE_DELETION,
    INITIATE_VM_DELETION,
)
from mcm_tasks.controllers.machine.drain.outcome import DrainResult, Outcome
from providers.errors import TRANSIENT_CODES, Code, code_of

NO_TARGET_SKIP: Final = (
    "Running without target cluster, skipping node drain and volume attachment deletion. "
    + INITIATE_VM_DELETION
)


def go_q(text: str) -> str:
    """A name quoted as Go's ``%q`` quotes it ("…"), so MCM's descriptions match word for word."""
    return json.dumps(text, ensure_ascii=False)


class Step(StrEnum):
    SET_TERMINATING = "set-terminating"
    GET_VM_STATUS = "get-vm-status"
    DRAIN = "drain"
    DELETE_VOLUME_ATTACHMENTS = "delete-volume-attachments"
    DELETE_VM = "delete-vm"
    DELETE_NODE = "delete-node"
    REMOVE_FINALIZER = "remove-finalizer"


#: checked in this order, by substring, as MCM's ``triggerDeletionFlow`` does
_STEPS_BY_DESCRIPTION: Final = (
    (GET_VM_STATUS, Step.GET_VM_STATUS),
    (INITIATE_DRAIN, Step.DRAIN),
    (DELETE_VOLUME_ATTACHMENTS, Step.DELETE_VOLUME_ATTACHMENTS),
    (INITIATE_VM_DELETION, Step.DELETE_VM),
    (INITIATE_NODE_DELETION, Step.DELETE_NODE),
    (INITIATE_FINALIZER_REMOVAL, Step.REMOVE_FINALIZER),
)


def step_of_description(description: str) -> Step:
    """The step a description asks for; an unrecognised one restarts the flow at step 1."""
    return next((step for text, step in _STEPS_BY_DESCRIPTION if text in description), Step.SET_TERMINATING)


def step_of(machine: Machine) -> Step:
    if machine.status.current_status.phase != MachinePhase.TERMINATING:
        return Step.SET_TERMINATING
    return step_of_description(machine.status.last_operation.description)


class Retry(StrEnum):
    NEXT_STEP = "next-step"
    SHORT = "short"
    MEDIUM = "medium"
    LONG = "long"


@dataclass(frozen=True)
class Transition:
    description: str
    state: MachineState
    retry: Retry


def moving_on(description: str) -> Transition:
    return Transition(description, MachineState.PROCESSING, Retry.NEXT_STEP)


def no_node_found(node_name: str) -> str:
    """Upstream ``deleteNodeObject``'s words for a Node that is not there (any more)."""
    return (
        f"No node object found for {go_q(node_name)}, continuing deletion flow. {INITIATE_FINALIZER_REMOVAL}"
    )


#: upstream ``updateMachineStatusAndNodeLabel``: a VM the provider no longer has, or never initialised,
#: still goes through the drain and DeleteMachine, so the provider removes what it left behind (NICs,
#: disks) before the Node goes; the seeds' older flow went to node deletion directly
VM_NOT_FOUND: Final = f"VM was not found at provider. Moving forward to node drain. {INITIATE_DRAIN}"
VM_UNINITIALIZED: Final = f"VM instance was not initialized. Moving forward to node drain. {INITIATE_DRAIN}"


def vm_status_transition(error: Exception | None, target_mode: bool = True) -> Transition:
    """After GetMachineStatus in step 2 (None: it answered). Without a target cluster there is no
    node to drain and no VolumeAttachment to delete: upstream goes straight to VM deletion. A
    NotFound goes on to the drain, not to node deletion (``VM_NOT_FOUND`` says why)."""
    onwards = moving_on(INITIATE_DRAIN if target_mode else NO_TARGET_SKIP)
    if error is None:
        return onwards
    code = code_of(error)
    if not target_mode and code in (Code.Unimplemented, Code.NotFound, Code.Uninitialized):
        return onwards
    if code is Code.NotFound:
        return moving_on(VM_NOT_FOUND)
    if code is Code.Uninitialized:
        return moving_on(VM_UNINITIALIZED)
    if code is Code.Unimplemented:
        return onwards
    if code in TRANSIENT_CODES:
        text = f"Error occurred while getting VM status, will retry - {error}. {GET_VM_STATUS}"
        return Transition(text, MachineState.FAILED, Retry.SHORT)
    text = f"Error occurred while getting VM status - {error}. {GET_VM_STATUS}"
    return Transition(text, MachineState.FAILED, Retry.MEDIUM)


def delete_vm_transition(error: Exception | None) -> Transition:
    """After DeleteMachine in step 5 (None: it succeeded)."""
    if error is None:
        return moving_on(f"VM deletion was successful. {INITIATE_NODE_DELETION}")
    code = code_of(error)
    if code is Code.NotFound:
        return moving_on(f"VM not found. Continuing deletion flow. {INITIATE_NODE_DELETION}")
    if code in TRANSIENT_CODES:
        text = (
            f"VM deletion failed due to - {error}. However, will re-try in the next resync. "
            f"{INITIATE_VM_DELETION}"
        )
        return Transition(text, MachineState.FAILED, Retry.SHORT)
    text = f"VM deletion failed due to - {error}. Aborting operation. {INITIATE_VM_DELETION}"
    return Transition(text, MachineState.FAILED, Retry.LONG)


def drain_transition(result: DrainResult) -> Transition | None:
    """After a drain step; None while the drain is still waiting."""
    outcome = result.outcome
    if outcome is Outcome.WAITING:
        return None
    if outcome is Outcome.SKIPPED:
        return moving_on(f"Skipping drain as nodeName is not a valid one for machine. {INITIATE_VM_DELETION}")
    if outcome is Outcome.SUCCEEDED:
        if result.forced:
            return moving_on(f"Force Drain successful. {DELETE_VOLUME_ATTACHMENTS}")
        return moving_on(f"Drain successful. {INITIATE_VM_DELETION}")
    if result.forced:
        return moving_on(
            f"Drain failed due to - {result.message}. However, since it's a force deletion shall continue "
            f"deletion of VM. {DELETE_VOLUME_ATTACHMENTS}"
        )
    if outcome is Outcome.CONDITION_FAILED:
        text = (
            f"Drain failed due to failure in update of node conditions - {result.message}. "
            f"Will retry in next sync. {INITIATE_DRAIN}"
        )
        return Transition(text, MachineState.FAILED, Retry.SHORT)
    text = f"Drain failed due to - {result.message}. Will retry in next sync. {INITIATE_DRAIN}"
    return Transition(text, MachineState.FAILED, Retry.SHORT)
