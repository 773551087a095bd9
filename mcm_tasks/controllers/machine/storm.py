"""Node-deletion storms as pure decisions (issue 29). A Node deleted in the target cluster deletes its
Machine (upstream ``reconcileClusterNode`` → ``triggerMachineDeletion``), so ``kubectl delete nodes
--all`` or a bad script would terminate every VM of the fleet. Within ``--node-deletion-storm-window``
at most ``storm_limit`` machines of one MachineDeployment are deleted for the loss of their Node; the
rest are held: kept, with their VM, until an operator releases them (``mcm-tasks admin release``) or
their Node comes back (a VM whose kubelet registers again gets its Machine back).

A machine already being deleted is never stopped, and the autoscaler's deliberate
``trigger-deletion-by-mcm`` annotation is not a Node loss: neither counts nor is held.
``storm_io`` keeps the window in Redis and carries the holds out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from mcm_tasks.api import Machine, NodeCondition
from mcm_tasks.api.constants import HELD_ANNOTATION, NODE_DELETION_RELEASED_ANNOTATION
from mcm_tasks.controllers.common.remediation import resolve_budget
from mcm_tasks.durations import format_duration

#: the hold's reason: annotation value, Event reason, the held machine's condition reason
NODE_DELETION_STORM: Final = "NodeDeletionStorm"
#: the held machine's status condition (beside the Node's conditions it mirrors; the Node's own list
#: replaces it when the Node is back, which is when the hold ends)
HELD_CONDITION: Final = "NodeDeletionHeld"
#: Events on a machine whose hold ends
NODE_RETURNED: Final = "NodeReturned"
HOLD_RELEASED: Final = "HoldReleased"
#: a percentage threshold never allows fewer than this many deletions per window
STORM_MIN: Final = 3


def storm_limit(threshold: str, machines: int) -> int | None:
    """How many machines of a deployment of ``machines`` may be deleted for their Node's loss within
    one window: a number as written, a percentage rounded up and at least ``STORM_MIN``; None when
    the guard is off (empty or 0)."""
    text = threshold.strip()
    resolved = resolve_budget(text, machines, round_up=True)
    if resolved is None or text in ("0", "0%"):
        return None
    return max(STORM_MIN, resolved) if text.endswith("%") else resolved


def is_held(machine: Machine) -> bool:
    return machine.metadata.annotations.get(HELD_ANNOTATION) == NODE_DELETION_STORM


def is_released(machine: Machine) -> bool:
    return NODE_DELETION_RELEASED_ANNOTATION in machine.metadata.annotations


def hold_message(name: str, node: str, deleted: int, limit: int, window: float, deployment: str) -> str:
    return (
        f"Machine {name} held: its Node {node} was deleted during a node-deletion storm ({deleted} machines "
        f"of {deployment or 'the namespace'} already deleted for their Nodes within "
        f"{format_duration(window)}, threshold {limit}); its VM is kept. Release with "
        f"`mcm-tasks admin release deployment/{deployment}`, or let its Node register again"
    )


def held_condition(message: str, now: datetime) -> NodeCondition:
    return NodeCondition(
        type=HELD_CONDITION,
        status="True",
        reason=NODE_DELETION_STORM,
        message=message,
        last_transition_time=now,
        last_heartbeat_time=now,
    )


def without_held_condition(conditions: list[NodeCondition]) -> list[NodeCondition]:
    return [c for c in conditions if c.type != HELD_CONDITION]


def hold_description(machine: Machine) -> str:
    """The hold's explanation, from the held machine's condition ("" when it has none)."""
    return next((c.message for c in machine.status.conditions if c.type == HELD_CONDITION), "")
