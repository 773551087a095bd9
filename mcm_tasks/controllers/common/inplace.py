"""In-place updates (GEP-31, MCM's ``InPlaceUpdate`` strategy): the vocabulary and the pure
decisions shared by the machine controller (which drains a selected node and follows the node
agent's result) and the MachineDeployment controller (which selects nodes and moves updated
machines to the new MachineSet).

The flow of one machine: its Node is labelled ``candidate-for-update`` while its MachineSet is an old
one; ``selected-for-update`` when it may go (the deployment chooses under ``Auto`` within
``inPlaceUpdate.maxUnavailable``; under ``Manual`` an operator labels it); the machine controller
cordons and drains the Node, sets the Node condition ``InPlaceUpdate`` to ``ReadyForUpdate`` and the
machine to ``InPlaceUpdating``; the node agent (outside MCM) updates the node and labels it
``update-result=successful`` (condition reason ``UpdateSuccessful``) or ``failed``; the machine goes
``InPlaceUpdateSuccessful`` or ``InPlaceUpdateFailed`` (also after ``--machine-inplace-update-timeout``);
the deployment moves a successful one to the new set and clears the Node's labels; the machine
is Running again once its Node is. A machine ``InPlaceUpdateFailed`` for longer than its health
timeout is Failed and replaced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from mcm_tasks.api import Machine, MachinePhase, ObjView
from mcm_tasks.api.constants import (
    CANDIDATE_FOR_UPDATE_LABEL_KEY,
    CANDIDATE_FOR_UPDATE_REASON,
    NODE_IN_PLACE_UPDATE_CONDITION,
    READY_FOR_UPDATE_REASON,
    SELECTED_FOR_UPDATE_LABEL_KEY,
    SELECTED_FOR_UPDATE_REASON,
    UPDATE_FAILED_REASON,
    UPDATE_RESULT_FAILED,
    UPDATE_RESULT_LABEL_KEY,
    UPDATE_RESULT_SUCCESSFUL,
    UPDATE_SUCCESSFUL_REASON,
)

#: the Node condition the machine controller (and a node agent that wants to) writes
IN_PLACE_CONDITION: Final = NODE_IN_PLACE_UPDATE_CONDITION
CANDIDATE_FOR_UPDATE: Final = CANDIDATE_FOR_UPDATE_REASON
SELECTED_FOR_UPDATE: Final = SELECTED_FOR_UPDATE_REASON
READY_FOR_UPDATE: Final = READY_FOR_UPDATE_REASON
UPDATE_SUCCESSFUL: Final = UPDATE_SUCCESSFUL_REASON
UPDATE_FAILED: Final = UPDATE_FAILED_REASON
#: the messages upstream's updateNodeConditionBasedOnLabel writes with each reason
CANDIDATE_MESSAGE: Final = "Node is a candidate for in-place update"
SELECTED_MESSAGE: Final = "Node is selected for in-place update"
SUCCESSFUL_MESSAGE: Final = "Node in-place update successful"
FAILED_MESSAGE: Final = "Node in-place update failed: {reason}"
#: Node annotation the node agent writes with a failed update
UPDATE_FAILED_REASON_ANNOTATION: Final = "node.machine.sapcloud.io/update-failed-reason"
#: upstream's machineutils.NodeReadyForUpdate
NODE_READY_FOR_UPDATE: Final = "Node drain successful. Node is ready for update"
UPDATE_SUCCESSFUL_DESCRIPTION: Final = "Machine updated in place successfully"
UPDATE_TIMED_OUT_DESCRIPTION: Final = "In-place update timed out"
DRAINING_DESCRIPTION: Final = "Node selected for update: draining it"

IN_PLACE_PHASES: Final = frozenset(
    {
        MachinePhase.IN_PLACE_UPDATING,
        MachinePhase.IN_PLACE_UPDATE_SUCCESSFUL,
        MachinePhase.IN_PLACE_UPDATE_FAILED,
    }
)
NODE_UPDATE_LABELS: Final = (
    CANDIDATE_FOR_UPDATE_LABEL_KEY,
    SELECTED_FOR_UPDATE_LABEL_KEY,
    UPDATE_RESULT_LABEL_KEY,
)


def labels_of(node: ObjView | None) -> dict[str, str]:
    return dict(((node or {}).get("metadata") or {}).get("labels") or {})


def condition_of(node: ObjView | None) -> dict[str, Any] | None:
    for condition in ((node or {}).get("status") or {}).get("conditions") or ():
        if condition.get("type") == IN_PLACE_CONDITION:
            return dict(condition)
    return None


def is_selected(node: ObjView | None) -> bool:
    return SELECTED_FOR_UPDATE_LABEL_KEY in labels_of(node)


def update_succeeded(node: ObjView | None) -> bool:
    """Upstream's ``!isUpdateNotSuccessful``: the agent's label and condition both say so."""
    condition = condition_of(node) or {}
    return (
        labels_of(node).get(UPDATE_RESULT_LABEL_KEY) == UPDATE_RESULT_SUCCESSFUL
        and condition.get("reason") == UPDATE_SUCCESSFUL
    )


def update_failed_reason(node: ObjView | None) -> str:
    """The node agent's explanation of a failed update (annotation ``update-failed-reason``)."""
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(UPDATE_FAILED_REASON_ANNOTATION, ""))


@dataclass(frozen=True)
class LabelCondition:
    """What ``update_node_condition_based_on_label`` decided: the ``InPlaceUpdate`` condition's new
    (reason, message), or None to leave it; and whether the Node waits for its drain (upstream's
    MediumRetry: selected, not drained yet)."""

    reason: str | None = None
    message: str = ""
    awaiting_drain: bool = False


def update_node_condition_based_on_label(node: ObjView | None) -> LabelCondition:
    """Upstream ``updateNodeConditionBasedOnLabel``: the labels the deployment and the node agent
    put on a Node, turned into the Node's ``InPlaceUpdate`` condition, which the rest of the flow
    reads (the deployment moves a machine on ``UpdateSuccessful``). A node agent need only write the
    ``update-result`` label, as upstream's contract says; one that writes the condition too is met
    with nothing to do.

    Only a Node labelled ``candidate-for-update`` is looked at. No condition yet (or one left
    ``UpdateSuccessful`` by an earlier update whose result label is gone) → ``CandidateForUpdate``,
    even when the Node is already selected: selection is taken on the next pass, so a Node is never
    drained on the strength of a condition it skipped. ``selected-for-update`` moves
    ``CandidateForUpdate`` to ``SelectedForUpdate``; a Node ``SelectedForUpdate`` waits for its
    drain. Otherwise the ``update-result`` label decides: ``successful`` → ``UpdateSuccessful``,
    ``failed`` → ``UpdateFailed`` with the agent's ``update-failed-reason``; a condition that says
    so already is left alone."""
    labels = labels_of(node)
    if CANDIDATE_FOR_UPDATE_LABEL_KEY not in labels:
        return LabelCondition()
    condition = condition_of(node)
    reason = (condition or {}).get("reason")
    result = labels.get(UPDATE_RESULT_LABEL_KEY)
    if condition is None or (reason == UPDATE_SUCCESSFUL and UPDATE_RESULT_LABEL_KEY not in labels):
        return LabelCondition(CANDIDATE_FOR_UPDATE, CANDIDATE_MESSAGE)
    if SELECTED_FOR_UPDATE_LABEL_KEY in labels:
        if reason == CANDIDATE_FOR_UPDATE:
            return LabelCondition(SELECTED_FOR_UPDATE, SELECTED_MESSAGE)
        if reason == SELECTED_FOR_UPDATE:
            return LabelCondition(awaiting_drain=True)
    if result == UPDATE_RESULT_SUCCESSFUL and reason != UPDATE_SUCCESSFUL:
        return LabelCondition(UPDATE_SUCCESSFUL, SUCCESSFUL_MESSAGE)
    if result == UPDATE_RESULT_FAILED and reason != UPDATE_FAILED:
        return LabelCondition(UPDATE_FAILED, FAILED_MESSAGE.format(reason=update_failed_reason(node)))
    return LabelCondition()


def with_condition(node: ObjView, condition: Mapping[str, Any]) -> dict[str, Any]:
    """The node as it is after ``condition`` was written on it (the pass goes on with it)."""
    status = dict(node.get("status") or {})
    others = [c for c in status.get("conditions") or () if c.get("type") != condition.get("type")]
    status["conditions"] = [*others, dict(condition)]
    return {**node, "status": status}


def is_ready(node: ObjView | None) -> bool:
    for condition in ((node or {}).get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


class Step(StrEnum):
    NONE = "none"
    #: cordon and drain the selected node; when drained, InPlaceUpdating
    PREPARE = "prepare"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed-out"
    #: back to Running (updated, moved to the new set, Node Ready)
    RUNNING = "running"
    #: failed too long ago: Failed, to be replaced
    GIVE_UP = "give-up"
    #: wait, come back in ``after`` seconds
    WAIT = "wait"


@dataclass(frozen=True)
class Decision:
    step: Step
    after: float | None = None
    reason: str = ""


def decide(
    machine: Machine, node: ObjView | None, now: datetime, update_timeout: float, health_timeout: float
) -> Decision:
    """The in-place step of one machine reconcile (upstream's in-place branches of
    ``reconcileMachineHealth`` and the node-drain-for-update). A machine whose update failed is
    given up (``GIVE_UP``: Failed, through the replacement permit like every health failure) after
    its health timeout, never with ``disableHealthTimeout``; an ``update-result=successful`` that
    comes after a failure (the agent tried again) still succeeds, as upstream."""
    phase = machine.status.current_status.phase
    since = machine.status.current_status.last_update_time or now
    elapsed = (now - since).total_seconds()
    labels = labels_of(node)
    result = labels.get(UPDATE_RESULT_LABEL_KEY)
    if machine.metadata.is_deleting or node is None:
        return Decision(Step.NONE)
    if phase == MachinePhase.IN_PLACE_UPDATING:
        if result == UPDATE_RESULT_SUCCESSFUL:
            return Decision(Step.SUCCEEDED)
        if result == UPDATE_RESULT_FAILED:
            return Decision(Step.FAILED, reason=update_failed_reason(node))
        if elapsed >= update_timeout:
            return Decision(Step.TIMED_OUT)
        return Decision(Step.WAIT, after=update_timeout - elapsed)
    if phase == MachinePhase.IN_PLACE_UPDATE_SUCCESSFUL:
        if SELECTED_FOR_UPDATE_LABEL_KEY not in labels and is_ready(node):
            return Decision(Step.RUNNING)
        return Decision(Step.NONE)
    if phase == MachinePhase.IN_PLACE_UPDATE_FAILED:
        if result == UPDATE_RESULT_SUCCESSFUL:  # the agent tried again, and this time it worked
            return Decision(Step.SUCCEEDED)
        if machine.spec.disable_health_timeout:
            return Decision(Step.NONE)
        if elapsed >= health_timeout:
            return Decision(Step.GIVE_UP)
        return Decision(Step.WAIT, after=health_timeout - elapsed)
    if phase == MachinePhase.RUNNING and SELECTED_FOR_UPDATE_LABEL_KEY in labels and result is None:
        return Decision(Step.PREPARE)
    return Decision(Step.NONE)
