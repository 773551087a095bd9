"""The sandbox's node agent for in-place updates: when it answers, and what."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_sandbox.kubelet.inplace import AGENT_ANNOTATION, INPLACE_ANNOTATION, agent_result
from mcm_sandbox.kubelet.node import iso

SELECTED = "node.machine.sapcloud.io/selected-for-update"
RESULT = "node.machine.sapcloud.io/update-result"
T = 1_800_000_000.0


def node(labels: dict[str, str], reason: str | None, order: str = "", since: float = T) -> dict[str, Any]:
    conditions = (
        []
        if reason is None
        else [{"type": "InPlaceUpdate", "reason": reason, "lastTransitionTime": iso(since)}]
    )
    annotations = {INPLACE_ANNOTATION: order} if order else {}
    return {"metadata": {"labels": labels, "annotations": annotations}, "status": {"conditions": conditions}}


@pytest.mark.parametrize(
    ("the_node", "now", "result"),
    [
        (node({SELECTED: "true"}, "ReadyForUpdate"), T + 2, "successful"),
        (node({SELECTED: "true"}, "ReadyForUpdate"), T + 0.5, None),  # not done yet
        (node({SELECTED: "true"}, "ReadyForUpdate", "fail"), T + 2, "failed"),
        (node({SELECTED: "true"}, "ReadyForUpdate", "hang"), T + 999, None),
        (node({SELECTED: "true"}, None), T + 2, None),  # MCM has not drained it yet
        (node({}, "ReadyForUpdate"), T + 2, None),
        (node({SELECTED: "true", RESULT: "successful"}, "UpdateSuccessful"), T + 2, None),
    ],
)
def test_agent_result(the_node: dict[str, Any], now: float, result: str | None) -> None:
    found = agent_result(the_node, now, delay=1.0)
    assert (None if found is None else found[0]["labels"][RESULT]) == result
    if found is not None:
        assert found[1] is not None
        assert found[1]["reason"] == ("UpdateFailed" if result == "failed" else "UpdateSuccessful")


@pytest.mark.parametrize("order", ["", "fail"])
def test_a_labels_only_agent_writes_the_label_and_no_condition(order: str) -> None:
    """Upstream's node agent contract: the result is a label; MCM writes the condition from it."""
    the_node = node({SELECTED: "true"}, "ReadyForUpdate", order)
    the_node["metadata"]["annotations"][AGENT_ANNOTATION] = "labels-only"
    found = agent_result(the_node, T + 2, delay=1.0)
    assert found is not None
    metadata, condition = found
    assert metadata["labels"][RESULT] == ("failed" if order else "successful")
    assert condition is None
    assert ("annotations" in metadata) is bool(order)  # the failure reason still comes with a failure
