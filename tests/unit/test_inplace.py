"""In-place update decisions, table-tested; the machine cases are upstream's own
(``reconcileMachineHealth`` entries for InPlaceUpdating / InPlaceUpdateFailed in machine_util_test.go,
the ``#updateNodeConditionBasedOnLabel`` table there); each row's id names the upstream entry it
comes from, ``ours:`` marks a row of our own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_tasks.api import Machine, MachineDeployment, MachineSet
from mcm_tasks.controllers.common import inplace as ip
from mcm_tasks.controllers.machinedeployment.inplace import (
    cleared_node,
    moved_labels,
    node_needs_clearing,
    selection_budget,
    stale_preserve_annotations,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SELECTED = "node.machine.sapcloud.io/selected-for-update"
RESULT = "node.machine.sapcloud.io/update-result"
UPDATE, HEALTH = 600.0, 600.0


CANDIDATE = "node.machine.sapcloud.io/candidate-for-update"
REASON_ANNOTATION = "node.machine.sapcloud.io/update-failed-reason"
PRESERVE = "node.machine.sapcloud.io/preserve"
UPDATED = {CANDIDATE: "true", SELECTED: "true", RESULT: "successful"}


def machine(phase: str, since: timedelta = timedelta(0), *, disable_health_timeout: bool = False) -> Machine:
    current = {"phase": phase, "lastUpdateTime": (NOW - since).isoformat()}
    spec = {"disableHealthTimeout": True} if disable_health_timeout else {}
    return Machine.model_validate(
        {"metadata": {"name": "m"}, "spec": spec, "status": {"currentStatus": current}}
    )


def node(labels: dict[str, str] | None = None, ready: str = "True", reason: str = "") -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": ready}]
    if reason:
        conditions.append({"type": "InPlaceUpdate", "status": "True", "reason": reason})
    return {"metadata": {"name": "n", "labels": labels or {}}, "status": {"conditions": conditions}}


UP = "reconcileMachineHealth: "


@pytest.mark.parametrize(
    ("phase", "since", "the_node", "step"),
    [
        pytest.param("InPlaceUpdating", timedelta(minutes=15), node(), ip.Step.TIMED_OUT,
                     id=UP + "Machine in InPlaceUpdating state for over 10min(InPlaceUpdateTimeout) "
                     "should be marked InPlaceUpdateFailed"),
        pytest.param("InPlaceUpdating", timedelta(0), node({RESULT: "successful"}), ip.Step.SUCCEEDED,
                     id=UP + "Machine in InPlaceUpdating state with node label "
                     "node.machine.sapcloud.io/update-result=successful "
                     "should be marked InPlaceUpdateSuccessful"),
        pytest.param("InPlaceUpdating", timedelta(0), node({RESULT: "failed"}), ip.Step.FAILED,
                     id=UP + "Machine in InPlaceUpdating state with node label "
                     "node.machine.sapcloud.io/update-result=failed should be marked InPlaceUpdateFailed"),
        pytest.param("InPlaceUpdating", timedelta(minutes=1), node(), ip.Step.WAIT,
                     id="ours: InPlaceUpdating within its timeout waits"),
        pytest.param("InPlaceUpdateFailed", timedelta(minutes=15), node(), ip.Step.GIVE_UP,
                     id=UP + "Machine in InPlaceUpdateFailed state for over 10min(healthTimeout) "
                     "should be marked Failed"),
        pytest.param("InPlaceUpdateFailed", timedelta(minutes=1), node(), ip.Step.WAIT,
                     id="ours: InPlaceUpdateFailed within its health timeout waits"),
        pytest.param("InPlaceUpdateFailed", timedelta(minutes=1), node({RESULT: "successful"}),
                     ip.Step.SUCCEEDED,
                     id="ours (upstream's code, no upstream row): a success after a failure still succeeds"),
        pytest.param("InPlaceUpdateSuccessful", timedelta(0), node(), ip.Step.RUNNING,
                     id="ours: Running again once moved (labels cleared) and Ready"),
        pytest.param("InPlaceUpdateSuccessful", timedelta(0), node({SELECTED: "true"}), ip.Step.NONE,
                     id="ours: not Running while still selected"),
        pytest.param("InPlaceUpdateSuccessful", timedelta(0), node(ready="False"), ip.Step.NONE,
                     id="ours: not Running while the Node is not Ready"),
        pytest.param("Running", timedelta(0), node({SELECTED: "true"}), ip.Step.PREPARE,
                     id="ours: a Running machine whose Node was selected is drained and handed to the agent"),
        pytest.param("Running", timedelta(0), node({SELECTED: "true", RESULT: "failed"}), ip.Step.NONE,
                     id="ours: a Node with a result is not drained again"),
        pytest.param("Running", timedelta(0), node(), ip.Step.NONE, id="ours: nothing selected"),
        pytest.param("Unknown", timedelta(0), node({SELECTED: "true"}), ip.Step.NONE,
                     id="ours: an Unknown machine is not drained for an update"),
        pytest.param("Running", timedelta(0), None, ip.Step.NONE, id="ours: no Node"),
    ],
)  # fmt: skip
def test_decide(phase: str, since: timedelta, the_node: dict[str, Any] | None, step: ip.Step) -> None:
    assert ip.decide(machine(phase, since), the_node, NOW, UPDATE, HEALTH).step is step


def test_a_failed_update_carries_the_agents_reason() -> None:
    failed = node({RESULT: "failed"})
    failed["metadata"]["annotations"] = {ip.UPDATE_FAILED_REASON_ANNOTATION: "disk full"}
    assert ip.decide(machine("InPlaceUpdating"), failed, NOW, UPDATE, HEALTH).reason == "disk full"


@pytest.mark.parametrize(
    ("labels", "reason", "succeeded"),
    [
        ({RESULT: "successful"}, "UpdateSuccessful", True),
        ({RESULT: "successful"}, "ReadyForUpdate", False),  # upstream isUpdateNotSuccessful: both needed
        ({}, "UpdateSuccessful", False),
        ({RESULT: "failed"}, "UpdateFailed", False),
    ],
)
def test_update_succeeded(labels: dict[str, str], reason: str, succeeded: bool) -> None:
    assert ip.update_succeeded(node(labels, reason=reason)) is succeeded


def deployment(replicas: int, max_unavailable: int | str) -> MachineDeployment:
    strategy = {"type": "InPlaceUpdate", "inPlaceUpdate": {"maxSurge": 0, "maxUnavailable": max_unavailable,
                                                            "orchestrationType": "Auto"}}  # fmt: skip
    return MachineDeployment.model_validate(
        {"metadata": {"name": "d"}, "spec": {"replicas": replicas, "strategy": strategy}}
    )


def machine_set(name: str, replicas: int, available: int) -> MachineSet:
    return MachineSet.model_validate(
        {
            "metadata": {"name": name},
            "spec": {"replicas": replicas},
            "status": {"availableReplicas": available},
        }
    )


@pytest.mark.parametrize(
    ("replicas", "max_unavailable", "old", "new", "undergoing", "budget"),
    [
        (3, 1, (3, 3), (0, 0), 0, 1),
        (3, 1, (3, 2), (0, 0), 1, 0),  # one already updating: nothing more
        (3, 1, (2, 2), (1, 1), 0, 1),
        (3, 2, (3, 3), (0, 0), 0, 2),
        (3, 1, (1, 1), (2, 1), 0, 0),  # the new set's unavailable machine uses the budget
        (4, "50%", (4, 4), (0, 0), 0, 2),
        (2, 1, (1, 1), (1, 1), 0, 1),
    ],
)
def test_selection_budget(
    replicas: int,
    max_unavailable: int | str,
    old: tuple[int, int],
    new: tuple[int, int],
    undergoing: int,
    budget: int,
) -> None:
    old_set, new_set = machine_set("old", *old), machine_set("new", *new)
    assert (
        selection_budget(deployment(replicas, max_unavailable), [old_set, new_set], new_set, undergoing)
        == budget
    )


def test_moved_labels_swap_the_selector_and_mark_the_move() -> None:
    old = MachineSet.model_validate(
        {
            "metadata": {"name": "o"},
            "spec": {"selector": {"matchLabels": {"pool": "p", "machine-template-hash": "a"}}},
        }
    )
    new = MachineSet.model_validate(
        {
            "metadata": {"name": "n"},
            "spec": {"selector": {"matchLabels": {"pool": "p", "machine-template-hash": "b"}}},
        }
    )
    patch = moved_labels({"pool": "p", "machine-template-hash": "a", "node": "n1"}, old, new)
    assert patch == {"pool": "p", "machine-template-hash": "b", RESULT: "successful"}


@pytest.mark.parametrize(
    ("disable", "step"),
    [
        pytest.param(False, ip.Step.GIVE_UP,
                     id="Machine in InPlaceUpdateFailed state for over 10min(healthTimeout) "
                     "should be marked Failed"),
        pytest.param(True, ip.Step.NONE,
                     id="Machine in InPlaceUpdateFailed state for over 10min(healthTimeout) "
                     "should not be marked Failed if DisableHealthTimeout is set"),
    ],
)  # fmt: skip
def test_a_failed_update_honours_disable_health_timeout(disable: bool, step: ip.Step) -> None:
    failed = machine("InPlaceUpdateFailed", timedelta(minutes=15), disable_health_timeout=disable)
    assert ip.decide(failed, node(), NOW, UPDATE, HEALTH).step is step


def labelled(
    labels: dict[str, str], reason: str | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    conditions: list[dict[str, str]] = [{"type": "Ready", "status": "True"}]
    if reason is not None:
        conditions.append({"type": "InPlaceUpdate", "status": "True", "reason": reason})
    meta = {"name": "node-0", "labels": labels, "annotations": annotations or {}}
    return {"metadata": meta, "status": {"conditions": conditions}}


@pytest.mark.parametrize(
    ("the_node", "reason", "message", "awaiting_drain"),
    [
        pytest.param(None, None, "", False, id="when node is not found"),
        pytest.param(labelled({}), None, "", False, id="ours: no candidate label, nothing to do"),
        pytest.param(labelled({CANDIDATE: "true"}), "CandidateForUpdate",
                     "Node is a candidate for in-place update", False,
                     id="when node has LabelKeyNodeCandidateForUpdate"),
        pytest.param(labelled({CANDIDATE: "true"}, "CandidateForUpdate"), None, "", False,
                     id="when node has LabelKeyNodeCandidateForUpdate but still not selected for update"),
        pytest.param(labelled({CANDIDATE: "true"}, "UpdateSuccessful"), "CandidateForUpdate",
                     "Node is a candidate for in-place update", False,
                     id="when node has LabelKeyNodeCandidateForUpdate also the in-place update reason is "
                     "UpdateSuccessful"),
        pytest.param(labelled({CANDIDATE: "true", SELECTED: "true"}, "CandidateForUpdate"),
                     "SelectedForUpdate", "Node is selected for in-place update", False,
                     id="when node has LabelKeyNodeSelectedForUpdate"),
        pytest.param(labelled({CANDIDATE: "true", SELECTED: "true"}, "SelectedForUpdate"), None, "", True,
                     id="when node has LabelKeyNodeSelectedForUpdate but drain is not successful yet"),
        pytest.param(labelled({CANDIDATE: "true", SELECTED: "true", RESULT: "successful"}, "ReadyForUpdate"),
                     "UpdateSuccessful", "Node in-place update successful", False,
                     id="when node update is successful"),
        pytest.param(labelled({CANDIDATE: "true", SELECTED: "true", RESULT: "failed"}, "DrainSuccessful",
                              {REASON_ANNOTATION: "OS image not found"}),
                     "UpdateFailed", "Node in-place update failed: OS image not found", False,
                     id="when node update has failed"),
        pytest.param(labelled({CANDIDATE: "true", SELECTED: "true"}), "CandidateForUpdate",
                     "Node is a candidate for in-place update", False,
                     id="ours: selected with no condition yet is a candidate first"),
        pytest.param(labelled(UPDATED, "UpdateSuccessful"),
                     None, "", False, id="ours: an agent that wrote the condition itself is left alone"),
        pytest.param(labelled({CANDIDATE: "true", SELECTED: "true", RESULT: "failed"}, "UpdateFailed"),
                     None, "", False, id="ours: a failure already recorded is left alone"),
    ],
)  # fmt: skip
def test_update_node_condition_based_on_label(
    the_node: dict[str, Any] | None, reason: str | None, message: str, awaiting_drain: bool
) -> None:
    decided = ip.update_node_condition_based_on_label(the_node)
    assert (decided.reason, decided.message, decided.awaiting_drain) == (reason, message, awaiting_drain)


def test_the_pass_goes_on_with_the_condition_it_wrote() -> None:
    before = labelled({CANDIDATE: "true"}, "ReadyForUpdate")
    after = ip.with_condition(
        before, {"type": "InPlaceUpdate", "status": "True", "reason": "UpdateSuccessful"}
    )
    assert (ip.condition_of(after) or {}).get("reason") == "UpdateSuccessful"
    assert [c["type"] for c in after["status"]["conditions"]] == ["Ready", "InPlaceUpdate"]
    assert (ip.condition_of(before) or {}).get("reason") == "ReadyForUpdate"  # the read is not changed


@pytest.mark.parametrize(
    ("the_node", "clear"),
    [
        pytest.param(labelled(UPDATED, "UpdateSuccessful"), True,
                     id="syncMachineSets: a new set's node with the update successful label and condition is "
                     "cleared and uncordoned"),
        pytest.param(labelled(UPDATED, "ReadyForUpdate"), False,
                     id="syncMachineSets: isUpdateNotSuccessful (condition not UpdateSuccessful) is skipped"),
        pytest.param(labelled({}, "UpdateSuccessful"), False,
                     id="syncMachineSets: isUpdateNotSuccessful (no result label) is skipped"),
        pytest.param(None, False, id="ours: no node"),
    ],
)  # fmt: skip
def test_node_needs_clearing(the_node: dict[str, Any] | None, clear: bool) -> None:
    assert node_needs_clearing(the_node) is clear


@pytest.mark.parametrize(
    ("annotations", "patch"),
    [
        pytest.param({PRESERVE: "auto-preserved"}, {PRESERVE: None},
                     id="#1137: the old set's auto-preserved mark goes"),
        pytest.param({PRESERVE: "when-failed"}, {}, id="#1137: manual preservation holds"),
        pytest.param({PRESERVE: "now"}, {}, id="#1137: manual now holds"),
        pytest.param({PRESERVE: "false"}, {}, id="ours: a user's false stays"),
        pytest.param({}, {}, id="ours: nothing to clear"),
    ],
)  # fmt: skip
def test_stale_preserve_annotations(annotations: dict[str, str], patch: dict[str, None]) -> None:
    assert stale_preserve_annotations(annotations) == patch


def test_cleared_node_is_what_sync_machine_sets_expects_of_a_node() -> None:
    """Upstream's syncMachineSets table checks every node after it: schedulable, and none of the
    candidate-for-update, selected-for-update, update-result labels (nor the failure reason)."""
    patch = cleared_node()
    assert patch["spec"] == {"unschedulable": False}
    assert patch["metadata"]["labels"] == {CANDIDATE: None, SELECTED: None, RESULT: None}
    assert patch["metadata"]["annotations"] == {REASON_ANNOTATION: None}
