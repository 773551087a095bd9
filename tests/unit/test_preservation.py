"""Machine preservation decisions, table-tested; the first tables are upstream's own cases
(machineutils ``TestGetPreserveAnnotationValue``, ``GetEffectivePreservationAnnotations``,
``IsPreservationRequested``, ``HasMachinePreservationExpired``,
``triggerAutoPreservationOfFailedMachines``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_tasks.api import Machine, MachineSet
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


def created(name: str, hours_ago: float, phase: str = "Failed", **kw: Any) -> Machine:
    m = machine(phase=phase, name=name, **kw)
    stamp = NOW - timedelta(hours=hours_ago)
    return m.model_copy(update={"metadata": m.metadata.model_copy(update={"creation_timestamp": stamp})})


def upstream_fleet(extra: list[Machine] | None = None) -> list[Machine]:
    """The machines of upstream's ``#manageAutoPreservationOfFailedMachines`` table."""
    return [
        created("machine-1", 2),
        created("machine-2", 1),
        created("machine-3", 2, "Running"),
        created("machine-4", 2, annotations={KEY: "false"}),
        *(extra or []),
    ]


_AUTO_CASES: list[tuple[str, int, int, list[Machine], list[str], list[str]]] = [
    ("should trigger auto preservation of 1 failed machine if AutoPreserveFailedMachineMax is 1 and "
     "AutoPreserveFailedMachineCount is 0", 0, 1, [], ["machine-2"], []),
    ("should not trigger auto preservation of failed machines if AutoPreserveFailedMachineMax is 0",
     0, 0, [], [], []),
    ("should not trigger auto preservation of failed machines if AutoPreserveFailedMachineCount has reached "
     "AutoPreserveFailedMachineMax", 2, 2, [], [], []),
    ("should trigger auto preservation of both failed machines if AutoPreserveFailedMachineCount is 0 and "
     "AutoPreserveFailedMachineMax is 2", 0, 2, [], ["machine-2", "machine-1"], []),
    ("should not trigger auto preservation of failed machine annotated with preserve=false even if "
     "AutoPreserveFailedMachineCount < AutoPreserveFailedMachineMax",
     0, 3, [], ["machine-2", "machine-1"], []),
    ("should stop auto preservation of machines annotated with preserve=auto-preserve if "
     "AutoPreserveFailedMachineCount > AutoPreserveFailedMachineMax", 1, 0,
     [created("machine-5", 3, annotations={KEY: "auto-preserved"}, expiry=NOW + timedelta(hours=1))],
     [], ["machine-5"]),
    # ours beyond upstream's table
    ("lowered from 2 to 1: the oldest auto-preserved machine goes", 2, 1,
     [created("old", 5, annotations={KEY: "auto-preserved"}),
      created("new", 4, annotations={KEY: "auto-preserved"})],
     [], ["old"]),
    ("a status behind the machines does not preserve past the maximum", 0, 1,
     [created("done", 3, annotations={KEY: "auto-preserved"})], [], []),
    ("a status ahead of the machines takes nothing off", 3, 1,
     [created("done", 3, annotations={KEY: "auto-preserved"})], [], []),
    ("never one the Node asked for, one being deleted, or one just expired", 0, 5,
     [created("node-asked", 0.5, annotations={LA: "when-failed"}), created("going", 0.5, deleting=True),
      created("expired", 0.5, expiry=NOW)], ["machine-2", "machine-1"], []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("status_count", "maximum", "extra", "preserve", "unpreserve"),
    [pytest.param(*c[1:], id=c[0]) for c in _AUTO_CASES],
)
def test_manage_auto_preservation(
    status_count: int, maximum: int, extra: list[Machine], preserve: list[str], unpreserve: list[str]
) -> None:
    """Upstream's ``#manageAutoPreservationOfFailedMachines`` table: room =
    AutoPreserveFailedMachineMax − status.autoPreserveFailedMachineCount, newest machine first."""
    plan = p.manage_auto_preservation(upstream_fleet(extra), maximum, status_count, NOW)
    assert [m.metadata.name for m in plan.preserve] == preserve
    assert [m.metadata.name for m in plan.unpreserve] == unpreserve


def test_no_auto_preservation_while_rolling_out() -> None:
    """Upstream MCM #1137: a set being rolled out auto-preserves nothing and lets go of its
    auto-preserved machines; a manual preservation is not the set's to end."""
    fleet = upstream_fleet(
        [
            created("auto", 3, annotations={KEY: "auto-preserved"}),
            created("manual", 3, annotations={KEY: "now"}),
        ]
    )
    plan = p.manage_auto_preservation(fleet, 3, 1, NOW, rolling_out=True)
    assert (plan.preserve, [m.metadata.name for m in plan.unpreserve]) == ((), ["auto"])


def machine_set_of(name: str, owner: str | None, replicas: int, current: int = 0) -> MachineSet:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment", "name": owner,
             "uid": f"uid-{owner}", "controller": True}
        ]  # fmt: skip
    return MachineSet.model_validate(
        {"metadata": meta, "spec": {"replicas": replicas}, "status": {"replicas": current}}
    )


@pytest.mark.parametrize(
    ("siblings", "rolling"),
    [
        pytest.param([], False, id="the only set"),
        pytest.param([machine_set_of("old", "d", 0, 0)], False, id="an old set scaled to 0 and empty"),
        pytest.param([machine_set_of("old", "d", 1, 1)], True, id="an old set still wanting machines"),
        pytest.param([machine_set_of("old", "d", 0, 2)], True, id="an old set still having machines"),
        pytest.param([machine_set_of("other", "e", 3, 3)], False, id="another deployment's set"),
        pytest.param([machine_set_of("orphan", None, 3, 3)], False, id="a set no deployment controls"),
    ],
)
def test_is_rolling_out(siblings: list[MachineSet], rolling: bool) -> None:
    me = machine_set_of("new", "d", 2, 2)
    assert p.is_rolling_out(me, [me, *siblings]) is rolling
    assert not p.is_rolling_out(machine_set_of("alone", None, 2, 2), siblings)


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
        ({LA: "now"}, ""),  # what a Node gave ends with the Node
        ({LA: "now", KEY: "false"}, ""),
        ({KEY: "bogus"}, "bogus"),  # not a preserving value: the machine is replaced
    ],
)
def test_no_node_to_read_falls_back_to_the_machine(annotations: dict[str, str], expected: str) -> None:
    """No Node (none named, gone, no target): as the machine controller reads it then, a value a
    Node gave is over and the machine's own applies."""
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
