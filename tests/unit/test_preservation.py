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


@pytest.mark.parametrize(
    ("node", "annotations", "phase", "expiry", "action", "machine_value", "last_applied", "clear_node"),
    [
        # nothing asked: stop whatever is left (a no-op when nothing is)
        (None, {}, "Running", None, p.Action.STOP, "", "", False),
        (None, {KEY: "now"}, "Running", None, p.Action.PRESERVE, "now", "", False),
        (None, {KEY: "when-failed"}, "Running", None, p.Action.STOP, "when-failed", "", False),
        (None, {KEY: "when-failed"}, "Failed", None, p.Action.PRESERVE, "when-failed", "", False),
        (None, {KEY: "false"}, "Failed", NOW + timedelta(hours=1), p.Action.STOP, "false", "", False),
        # expired: stop and drop the request, from the machine and from the node
        (None, {KEY: "when-failed"}, "Failed", NOW, p.Action.STOP, "", "", False),
        ({KEY: "now"}, {LA: "now"}, "Running", NOW, p.Action.STOP, "", "", True),
        # an auto-preserved machine that recovers loses its annotation
        (None, {KEY: "auto-preserved"}, "Running", NOW + timedelta(hours=1), p.Action.STOP, "", "", False),
        # the node asks: recorded as last-applied, the machine's own value deleted
        ({KEY: "when-failed"}, {KEY: "now"}, "Failed", None, p.Action.PRESERVE, "", "when-failed", False),
        # the node's annotation went: stop
        ({}, {LA: "now"}, "Running", NOW + timedelta(hours=1), p.Action.STOP, "", "", False),
        (None, {KEY: "bogus"}, "Failed", None, p.Action.NONE, "bogus", "", False),
    ],
)  # fmt: skip
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
