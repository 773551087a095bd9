"""Machine preservation decisions, table-tested; the first tables are upstream's own cases
(machineutils ``TestGetPreserveAnnotationValue``, ``GetEffectivePreservationAnnotations``,
``IsPreservationRequested``, ``HasMachinePreservationExpired``,
``triggerAutoPreservationOfFailedMachines``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_tasks.api import Machine
from mcm_tasks.controllers.common import preservation as p

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
KEY = "node.machine.sapcloud.io/preserve"
LA = p.LAST_APPLIED_NODE_PRESERVE_ANNOTATION


def machine(
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    expiry: datetime | None = None,
    *,
    name: str = "m",
    failed_at: datetime | None = None,
    deleting: bool = False,
) -> Machine:
    current: dict[str, Any] = {"phase": phase}
    if expiry is not None:
        current["preserveExpiryTime"] = expiry.isoformat()
    if failed_at is not None:
        current["lastUpdateTime"] = failed_at.isoformat()
    meta: dict[str, Any] = {"name": name, "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-03-01T11:00:00Z"
    return Machine.model_validate({"metadata": meta, "status": {"currentStatus": current}})


@pytest.mark.parametrize(
    ("node", "machine_annotations", "expected"),
    [
        (None, {KEY: "when-failed"}, ("when-failed", True)),
        (None, {KEY: "invalid-value"}, ("", False)),
        (None, {}, ("", False)),
        ({KEY: "now"}, {}, ("now", True)),
        ({KEY: "invalid-value"}, {KEY: "when-failed"}, ("when-failed", True)),
        ({KEY: "now"}, {KEY: "when-failed"}, ("now", True)),  # the node takes priority
        ({}, {LA: "now"}, ("", True)),  # the node's annotation went: stop
        ({}, {}, ("", False)),
        ({}, {KEY: "auto-preserved"}, ("auto-preserved", True)),
        ({KEY: "false"}, {}, ("false", True)),
        ({KEY: "invalid-value"}, {LA: "now"}, ("", True)),
    ],
    ids=[
        "node nil, machine valid", "node nil, machine invalid", "node nil, machine none",
        "node valid", "node invalid, machine valid", "node and machine valid: node wins",
        "node none, machine last-applied", "node none, machine none", "node none, machine auto",
        "node false", "node invalid, machine last-applied",
    ],
)  # fmt: skip
def test_annotation_value(
    node: dict[str, str] | None, machine_annotations: dict[str, str], expected: tuple[str, bool]
) -> None:
    assert p.annotation_value(node, machine_annotations, has_expiry=False) == expected


def test_a_leftover_expiry_is_work() -> None:
    assert p.annotation_value(None, {}, has_expiry=True) == ("", True)


@pytest.mark.parametrize(
    ("node", "machine_value", "last_applied", "expected"),
    [
        ("", "A", "", ("A", "A", "")),
        ("", "", "", ("", "", "")),
        ("", "", "A", ("", "", "")),
        ("A", "", "", ("A", "", "A")),
        ("A", "B", "", ("A", "", "A")),  # the node's value wins, the machine's is deleted
        ("A", "A", "A", ("A", "", "A")),
        ("A", "A", "B", ("A", "", "A")),
        ("", "now", "now", ("", "", "")),
    ],
    ids=[
        "when node is not annotated and laNodeAnnotationValue is empty, should return machine's value",
        "when neither node nor machine is not annotated and laNodeAnnotationValue is empty",
        "when neither node nor machine is annotated and laNodeAnnotationValue is A",
        "when node is annotated, laNodeAnnotationValue is empty, and machine is not annotated",
        "when node is annotated, laNodeAnnotationValue is empty, and machine is annotated differently",
        "when node, machine annotation values and laNodeAnnotationValue are the same",
        "when node, machine annotation values are the same and laNodeAnnotationValue differs",
        # updatePreserveAnnotationOnMachine: the machine's own 'now' goes once the Node is in control
        "machine has preserve=now and last-applied=now and nodeValue='': should clear preserve annotation",
    ],
)
def test_effective_values(
    node: str, machine_value: str, last_applied: str, expected: tuple[str, str, str]
) -> None:
    assert p.effective_values(node, last_applied, machine_value) == expected


@pytest.mark.parametrize(
    ("expiry", "expired"),
    [(None, False), (NOW - timedelta(hours=1), True), (NOW, True), (NOW + timedelta(hours=1), False)],
)
def test_is_expired(expiry: datetime | None, expired: bool) -> None:
    assert p.is_expired(machine(expiry=expiry), NOW) is expired


@pytest.mark.parametrize(
    ("annotations", "phase", "expiry", "preserved"),
    [
        ({KEY: "now"}, "Running", None, True),
        ({KEY: "now"}, "Running", NOW + timedelta(hours=1), True),
        ({KEY: "now"}, "Failed", NOW - timedelta(seconds=1), False),  # expired
        ({KEY: "when-failed"}, "Running", None, False),
        ({KEY: "when-failed"}, "Failed", None, True),  # not yet written by the machine controller
        ({KEY: "auto-preserved"}, "Failed", NOW + timedelta(hours=1), True),
        ({KEY: "auto-preserved"}, "Running", None, False),
        ({KEY: "false"}, "Failed", NOW + timedelta(hours=1), False),
        ({KEY: "some-invalid-value"}, "Failed", None, False),
        ({}, "Failed", NOW + timedelta(hours=1), False),  # annotation removed: over
        ({LA: "when-failed"}, "Failed", None, True),  # the node asked
        ({LA: "when-failed", KEY: "false"}, "Failed", None, True),  # the node's value wins
    ],
)
def test_is_preserved(
    annotations: dict[str, str], phase: str, expiry: datetime | None, preserved: bool
) -> None:
    assert p.is_preserved(machine(annotations, phase, expiry), NOW) is preserved


@pytest.mark.parametrize(
    ("maximum", "already", "expected"),
    [(0, 0, 0), (None, 0, 0), (1, 0, 1), (3, 0, 2), (2, 1, 1), (2, 2, 0), (1, 3, 0)],
)
def test_auto_preserve_up_to_the_max(maximum: int | None, already: int, expected: int) -> None:
    """Upstream: capacity = autoPreserveFailedMachineMax − machines already auto-preserved."""
    machines = [machine({KEY: "auto-preserved"}, "Failed", name=f"a{i}") for i in range(already)]
    machines += [
        machine({}, "Failed", name="f1", failed_at=NOW - timedelta(minutes=5)),
        machine({}, "Failed", name="f2", failed_at=NOW - timedelta(minutes=1)),
        machine({KEY: "false"}, "Failed", name="opted-out"),
        machine({KEY: "when-failed"}, "Failed", name="manual"),
        machine({}, "Failed", name="going", deleting=True),
        machine({}, "Running", name="healthy"),
    ]
    chosen = [m.metadata.name for m in p.auto_preserve_candidates(machines, maximum, NOW)]
    assert chosen == ["f2", "f1"][:expected]  # the newest failure first


H = timedelta(hours=1)
M = timedelta(minutes=1)
STOP, KEEP, NONE = p.Action.STOP, p.Action.PRESERVE, p.Action.NONE

#: upstream's ``#manageMachinePreservation`` table (machine_test.go), one row each: the Node's
#: annotations (None: no Node), the machine's, phase, expiry → action, the machine's preserve value
#: and last-applied Node value afterwards, whether the Node's annotation is removed
_MANAGE_CASES: list[tuple[str, Any, dict[str, str], str, Any, p.Action, str, str, bool]] = [
    ("when no preserve annotation is set on machine and node, should return LongRetry",
     {}, {}, "Running", None, STOP, "", "", False),
    ("when preserve annotation 'now' is added to node of Running machine, should successfully start "
     "preservation",
     {KEY: "now"}, {}, "Running", None, KEEP, "", "now", False),
    ("when preserve annotation 'when-failed' added to node of Running machine, should not start preservation",
     {KEY: "when-failed"}, {}, "Running", None, STOP, "", "when-failed", False),
    ("when node of Failed machine has annotation `when-failed`, should start preservation",
     {KEY: "when-failed"}, {}, "Failed", None, KEEP, "", "when-failed", False),
    ("when node of preserved machine is annotated with preserve value 'false', should stop preservation",
     {KEY: "false"}, {}, "Running", NOW + H, STOP, "", "false", False),
    ("when machine is annotated for auto-preservation by MCM, should start preservation",
     {}, {KEY: "auto-preserved"}, "Failed", None, KEEP, "auto-preserved", "", False),
    ("when machine is annotated with preserve=now and preservation times out, should stop preservation, "
     "and remove annotation", {}, {KEY: "now"}, "Running", NOW - M, STOP, "", "", False),
    ("when machine is annotated with preserve=when-failed and preservation times out, should stop "
     "preservation, and remove annotation", {}, {KEY: "when-failed"}, "Failed", NOW - M, STOP, "", "", False),
    ("when invalid preserve annotation is added on machine of un-preserved machine, and node is not "
     "annotated should do nothing",
     {}, {KEY: "invalidValue"}, "Running", None, STOP, "invalidValue", "", False),
    ("when invalid preserve annotation is added on node of un-preserved machine, should do nothing",
     {KEY: "invalidValue"}, {}, "Running", None, NONE, "", "", False),
    ("when a machine is annotated with preserve=now, but has no backing node, should start preservation",
     None, {KEY: "now"}, "Unknown", None, KEEP, "now", "", False),
    ("when preservation times out for a machine annotated with preserve=now, but has no backing node, "
     "should stop preservation", None, {KEY: "now"}, "Unknown", NOW - M, STOP, "", "", False),
    ("when a machine has a backing node, but node retrieval fails",
     None, {KEY: "now"}, "Unknown", None, KEEP, "now", "", False),
    ("when auto-preserved machine moves to Running, should stop preservation and remove auto-preserve "
     "annotation", {}, {KEY: "auto-preserved"}, "Running", NOW + H, STOP, "", "", False),
    ("when node is annotated with 'now' and machine is annotated with 'when-failed', should start "
     "preservation and remove preserve annotation from machine",
     {KEY: "now"}, {KEY: "when-failed"}, "Running", None, KEEP, "", "now", False),
    ("when node and machine are found to be annotated with \"\", and 'now', respectively and last applied "
     "node preserve value is 'now', should stop preservation",
     {}, {KEY: "now", LA: "now"}, "Running", NOW + H, STOP, "", "", False),
    ("when preserved machine with preserve=when-failed recovers to Running, should stop preservation and "
     "untaint node", {}, {KEY: "when-failed"}, "Running", NOW + H, STOP, "when-failed", "", False),
    ("when preserved machine with preserve=when-failed has expired preservation while in Failed phase, "
     "should stop preservation and untaint node",
     {}, {KEY: "when-failed"}, "Failed", NOW - M, STOP, "", "", False),
    ("when preserve=when-failed machine is in Failed phase with active preservation and tainted node, node "
     "should stay tainted", {KEY: "when-failed"}, {}, "Failed", None, KEEP, "", "when-failed", False),
    ("when preserve=now machine is Failed with active preservation and tainted node, node should stay "
     "tainted",
     {}, {KEY: "now"}, "Failed", None, KEEP, "now", "", False),
    # ours beyond upstream's table: an expired preservation the Node asked for drops the Node's value
    ("expired on the Node's request: the Node's annotation goes too",
     {KEY: "now"}, {LA: "now"}, "Running", NOW, STOP, "", "", True),
    ("the Node's annotation went: stop", {}, {LA: "now"}, "Running", NOW + H, STOP, "", "", False),
    ("false on the machine is kept after an expiry",
     None, {KEY: "false"}, "Failed", NOW + H, STOP, "false", "", False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("node", "annotations", "phase", "expiry", "action", "machine_value", "last_applied", "clear_node"),
    [pytest.param(*c[1:], id=c[0]) for c in _MANAGE_CASES],
)
def test_decide(
    node: dict[str, str] | None,
    annotations: dict[str, str],
    phase: str,
    expiry: datetime | None,
    action: p.Action,
    machine_value: str,
    last_applied: str,
    clear_node: bool,
) -> None:
    d = p.decide(machine(annotations, phase, expiry), node, NOW)
    assert (d.action, d.machine_value, d.last_applied, d.clear_node_value) == (
        action,
        machine_value,
        last_applied,
        clear_node,
    )


def failed(annotations: dict[str, str], expiry: datetime | None = None) -> Machine:
    return machine(annotations, "Failed", expiry)


#: upstream's ``#shouldFailedMachineBeTerminated`` table (pkg/controller/machineset_test.go): a
#: Failed machine with a Node; the Node's preserve value ("" = the Node has none) and the machine's
_SHOULD_TERMINATE_CASES: list[tuple[str, datetime | None, str, dict[str, str], bool]] = [
    ("should return false if preserve expiry time is in the future",
     NOW + timedelta(hours=1), "", {KEY: "now"}, False),
    ("should return true if machine is annotated with preserve=false", None, "", {KEY: "false"}, True),
    ("should return true if node is annotated with preserve=false", None, "false", {}, True),
    ("should return false if machine is annotated with preserve=now, and node has not been annotated, "
     "and preserveExpiryTime is not yet set", None, "", {KEY: "now"}, False),
    ("should return false if node is annotated with preserve=now, and preserveExpiryTime is not yet set",
     None, "now", {}, False),
    ("should return false if machine is annotated with preserve=when-failed, and node has not been annotated",
     None, "", {KEY: "when-failed"}, False),
    ("should return false if node is annotated with preserve=when-failed", None, "when-failed", {}, False),
    ("should return true if preservation has timed out", NOW - timedelta(seconds=1), "now", {}, True),
    ("should return true if laNodePreserveValue is not empty, machineAnnotationValue is not empty and "
     "nodeAnnotationValue is empty, indicating that node Annotation Value was deleted",
     None, "", {LA: "now", KEY: "when-failed"}, True),
    # ours beyond upstream's table
    ("node auto-preserved value keeps the machine", None, "auto-preserved", {}, False),
    ("the node's value wins over the machine's", None, "false", {KEY: "when-failed"}, True),
    ("an invalid value keeps nothing", None, "bogus", {}, True),
    # deliberate difference: a request withdrawn ends the preservation at once, expiry or not
    ("deliberate: node annotation removed while the expiry is still written",
     NOW + timedelta(hours=1), "", {LA: "when-failed"}, True),
    ("deliberate: node annotation set to false while the expiry is still written",
     NOW + timedelta(hours=1), "false", {LA: "now"}, True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("expiry", "node_value", "annotations", "terminate"),
    [pytest.param(e, n, a, t, id=case) for case, e, n, a, t in _SHOULD_TERMINATE_CASES],
)
def test_should_failed_machine_be_terminated(
    expiry: datetime | None, node_value: str, annotations: dict[str, str], terminate: bool
) -> None:
    assert p.should_failed_machine_be_terminated(failed(annotations, expiry), node_value, NOW) is terminate


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({KEY: "when-failed"}, "when-failed"),
        ({LA: "now"}, "now"),  # the Node's value as the machine controller last applied it
        ({LA: "now", KEY: "false"}, "now"),
        ({KEY: "bogus"}, ""),
    ],
)
def test_no_node_to_read_falls_back_to_the_machine(annotations: dict[str, str], expected: str) -> None:
    """No Node (none named, gone, no target): the machine's own view, as upstream's machine
    controller enforces the machine's value when the Node is not found."""
    assert p.find_effective_preserve_value(failed(annotations), None) == expected


EXP = "2026-03-01T15:00:00Z"
OK_MSG = f"Preserved node drained successfully. Machine preserved until {EXP}."
BAD_MSG = f"Preserved node could not be drained. Machine preserved until {EXP}."
BY_USER, BY_MCM = "Preserved by user.", "Preserved by MCM."


def cond(status: str, message: str, reason: str = BY_USER) -> dict[str, str]:
    return {"type": "Preserved", "status": status, "reason": reason, "message": message}


#: upstream's ``#computeNewNodePreservedCondition`` table (machine_util_test.go): phase, preserve
#: value, whether the drain failed, the condition there → the one written (None: no update)
_CONDITION_CASES: list[tuple[str, str, str, bool, Any, p.PreservedCondition | None]] = [
    ("when preserve=now, machine is Running, no existing condition", "Running", "now", False, None,
     p.PreservedCondition("True", BY_USER, f"Machine preserved until {EXP}.")),
    ("when preserve=now, machine is Failed, drain successful, no existing condition",
     "Failed", "now", False, None, p.PreservedCondition("True", BY_USER, OK_MSG)),
    ("when preserve=now, machine is Failed, drain is unsuccessful, no existing condition",
     "Failed", "now", True, None, p.PreservedCondition("False", BY_USER, BAD_MSG)),
    ("when machine auto-preserved by MCM, machine is Failed, drain is successful, no existing condition",
     "Failed", "auto-preserved", False, None, p.PreservedCondition("True", BY_MCM, OK_MSG)),
    ("when preserve=now, machine is Failed, drain is unsuccessful, existing condition present",
     "Failed", "now", True, cond("False", f"Machine preserved until {EXP}"),
     p.PreservedCondition("False", BY_USER, BAD_MSG)),
    ("when preserve=now, machine is Failed, drain is unsuccessful for the second time, existing condition "
     "present", "Failed", "now", True, cond("False", BAD_MSG), None),
    ("when preserve=now, machine is Failed, drain is successful, existing condition present and status is "
     "true", "Failed", "now", False, cond("True", OK_MSG), None),
    # ours beyond upstream's table: a drain that failed, then succeeded
    ("drain failed before, succeeds now", "Failed", "when-failed", False, cond("False", BAD_MSG),
     p.PreservedCondition("True", BY_USER, OK_MSG)),
    ("Running again under now: the condition already says preserved", "Running", "now", False,
     cond("True", OK_MSG), None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("phase", "value", "drain_failed", "existing", "expected"),
    [pytest.param(*c[1:], id=c[0]) for c in _CONDITION_CASES],
)
def test_new_preserved_condition(
    phase: str, value: str, drain_failed: bool, existing: Any, expected: p.PreservedCondition | None
) -> None:
    assert p.new_preserved_condition(phase, EXP, value, drain_failed, existing) == expected


@pytest.mark.parametrize(
    ("phase", "existing", "drain"),
    [
        pytest.param("Running", None, False, id="should return false when machine is Running"),
        pytest.param(
            "Failed",
            None,
            True,
            id="should return true when machine is Failed and there is no existing node condition",
        ),
        pytest.param(
            "Failed",
            cond("False", "Preserved node could not be drained."),
            True,
            id="should return true when machine is Failed and existing node condition message is "
            "PreservedNodeDrainUnsuccessful",
        ),
        pytest.param("Failed", cond("True", OK_MSG), False, id="drained once: not again"),
    ],
)
def test_should_preserved_node_be_drained(phase: str, existing: Any, drain: bool) -> None:
    assert p.should_preserved_node_be_drained(existing, phase) is drain


def test_the_reasons_are_upstreams() -> None:
    """Upstream v1alpha1's NodePreserved reasons and drain messages, verbatim."""
    assert (p.PRESERVED_CONDITION, p.PRESERVED_BY_MCM_REASON, p.PRESERVED_BY_USER_REASON) == (
        "Preserved",
        "Preserved by MCM.",
        "Preserved by user.",
    )
    assert p.PRESERVATION_STOPPED_REASON == "Preservation stopped."
    stopped = p.stopped_condition(p.STOPPED_EXPIRED)
    assert (stopped.status, stopped.reason) == ("False", "Preservation stopped.")
    assert stopped.message == "Machine preservation stopped: the preservation expired."


@pytest.mark.parametrize(
    ("node", "annotations", "phase", "expiry", "why"),
    [
        ({}, {LA: "now"}, "Running", NOW + timedelta(hours=1), p.STOPPED_WITHDRAWN),
        ({KEY: "false"}, {}, "Failed", NOW + timedelta(hours=1), p.STOPPED_FALSE),
        (None, {KEY: "now"}, "Running", NOW, p.STOPPED_EXPIRED),
        (None, {KEY: "when-failed"}, "Running", NOW + timedelta(hours=1), p.STOPPED_RECOVERED),
    ],
)
def test_a_stop_says_why(
    node: dict[str, str] | None, annotations: dict[str, str], phase: str, expiry: datetime, why: str
) -> None:
    d = p.decide(machine(annotations, phase, expiry), node, NOW)
    assert (d.action, d.why) == (p.Action.STOP, why)
