"""The node agent of an in-place update (Gardener's node agent, outside MCM), played by the kubelet
simulator: a Node MCM labelled ``selected-for-update`` and marked ready for it (condition
``InPlaceUpdate`` with reason ``ReadyForUpdate``) is updated after ``delay`` seconds, and the result
written as the agent writes it: label ``update-result=successful`` and condition reason
``UpdateSuccessful``, or ``update-result=failed`` with the ``update-failed-reason`` annotation.

Orders, as Node annotations: ``sandbox.mcm-tasks.io/inplace-update: "fail"`` reports a failed
update, ``"hang"`` never finishes one (for MCM's ``--machine-inplace-update-timeout``);
``sandbox.mcm-tasks.io/inplace-agent: "labels-only"`` makes the agent behave as upstream's contract
has it: it writes the ``update-result`` label (and the failure reason) and no condition, leaving
the ``InPlaceUpdate`` condition to MCM (``updateNodeConditionBasedOnLabel``)."""

from __future__ import annotations

from typing import Any

from mcm_sandbox.kubelet.node import ANNOTATION_PREFIX, annotations_of, iso, parse_time
from mcm_tasks.api.constants import SELECTED_FOR_UPDATE_LABEL_KEY, UPDATE_RESULT_LABEL_KEY
from mcm_tasks.controllers.common.inplace import (
    IN_PLACE_CONDITION,
    READY_FOR_UPDATE,
    UPDATE_FAILED,
    UPDATE_FAILED_REASON_ANNOTATION,
    UPDATE_SUCCESSFUL,
    condition_of,
    labels_of,
)

INPLACE_ANNOTATION = ANNOTATION_PREFIX + "inplace-update"
AGENT_ANNOTATION = ANNOTATION_PREFIX + "inplace-agent"
LABELS_ONLY = "labels-only"
FAILED_REASON = "update failed as ordered by annotation " + INPLACE_ANNOTATION


def agent_result(
    node: dict[str, Any], now: float, delay: float
) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """(metadata patch, InPlaceUpdate condition or None under ``labels-only``) the agent writes on
    this node now, or None."""
    labels = labels_of(node)
    if SELECTED_FOR_UPDATE_LABEL_KEY not in labels or UPDATE_RESULT_LABEL_KEY in labels:
        return None
    condition = condition_of(node)
    if condition is None or condition.get("reason") != READY_FOR_UPDATE:
        return None
    order = annotations_of(node).get(INPLACE_ANNOTATION, "").strip().lower()
    if order == "hang":
        return None
    since = parse_time(condition.get("lastTransitionTime")) or now
    if now - since < delay:
        return None
    stamp = iso(now)
    failed = order == "fail"
    metadata: dict[str, Any] = {"labels": {UPDATE_RESULT_LABEL_KEY: "failed" if failed else "successful"}}
    if failed:
        metadata["annotations"] = {UPDATE_FAILED_REASON_ANNOTATION: FAILED_REASON}
    if annotations_of(node).get(AGENT_ANNOTATION, "").strip().lower() == LABELS_ONLY:
        return metadata, None
    new_condition = {
        "type": IN_PLACE_CONDITION,
        "status": "True",
        "reason": UPDATE_FAILED if failed else UPDATE_SUCCESSFUL,
        "message": FAILED_REASON if failed else "node updated in place (sandbox node agent)",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }
    return metadata, new_condition
