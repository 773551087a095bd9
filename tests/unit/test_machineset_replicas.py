"""manageReplicas decisions: the diff, burst limit, freeze, Failed and marked machines, deletion order,
slow-start batches (``mcm_tasks.controllers.machineset.replicas``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_tasks.api import Machine, MachineSet
from mcm_tasks.api.constants import (
    FREEZE_LABEL_KEY,
    LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION,
    MACHINE_PRIORITY_ANNOTATION,
    MARKED_FOR_DELETION_TIME_ANNOTATION,
    PRESERVE_ANNOTATION,
    SCALE_UP_DISABLED_LABEL_KEY,
)
from mcm_tasks.controllers.common.preservation import LAST_APPLIED_NODE_PRESERVE_ANNOTATION
from mcm_tasks.controllers.machineset.replicas import (
    BURST_REPLICAS,
    SKIP_FROZEN,
    SKIP_SCALE_UP_DISABLED,
    DeletionOrder,
    deletion_order,
    deletion_order_of,
    is_preserved,
    machine_priority,
    marked_for_deletion,
    plan_replicas,
    slow_start,
    slow_start_batches,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def machine(
    name: str,
    phase: str = "Running",
    *,
    age: int = 0,
    priority: str | None = None,
    marked: str | None = None,
    deleting: bool = False,
    preserve: str | None = None,
    preserve_until: datetime | None = None,
    annotations: dict[str, str] | None = None,
) -> Machine:
    annotations = dict(annotations or {})
    if priority is not None:
        annotations[MACHINE_PRIORITY_ANNOTATION] = priority
    if marked is not None:
        annotations[MARKED_FOR_DELETION_TIME_ANNOTATION] = marked
    if preserve is not None:
        annotations[PRESERVE_ANNOTATION] = preserve
    meta: dict[str, Any] = {
        "name": name,
        "annotations": annotations,
        "creationTimestamp": (T0 - timedelta(minutes=age)).isoformat(),
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-03-01T11:00:00Z"
    current: dict[str, Any] = {"phase": phase}
    if preserve_until is not None:
        current["preserveExpiryTime"] = preserve_until.isoformat()
    return Machine.model_validate({"metadata": meta, "status": {"currentStatus": current}})


def machine_set(
    replicas: int, labels: dict[str, str] | None = None, *, scaler: str | None = None
) -> MachineSet:
    annotations = {} if scaler is None else {LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION: scaler}
    return MachineSet.model_validate(
        {"metadata": {"name": "ms", "labels": labels or {}, "annotations": annotations},
         "spec": {"replicas": replicas}}
    )  # fmt: skip


def names(machines: Any) -> list[str]:
    return [m.metadata.name for m in machines]


# --- the diff -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "machines", "create", "delete"),
    [
        (0, [], 0, []),
        (1, [], 1, []),
        (6, [machine("a")], 5, []),
        (3, [machine("a"), machine("b"), machine("c")], 0, []),
        (1, [machine("a", age=2), machine("b", age=1), machine("c", age=3)], 0, ["c", "a"]),
        (0, [machine("a")], 0, ["a"]),
        # terminating machines (phase or deletionTimestamp) do not count
        (2, [machine("a"), machine("t", "Terminating"), machine("d", deleting=True)], 1, []),
        # a Failed machine counts until it is deleted, then it is replaced
        (2, [machine("a"), machine("f", "Failed")], 0, ["f"]),
        (2, [machine("a"), machine("f", "Failed", deleting=True)], 1, []),
        # more than the excess: the excess by order plus every Failed one
        (2, [machine("a"), machine("b"), machine("c"), machine("f", "Failed")], 0, ["f", "a"]),
    ],
)
def test_plan(replicas: int, machines: list[Machine], create: int, delete: list[str]) -> None:
    plan = plan_replicas(machine_set(replicas), machines, NOW)
    assert plan.create == create
    assert names(plan.delete) == delete


def test_excess_and_failed_are_both_deleted() -> None:
    machines = [machine("a", age=1), machine("b", age=2), machine("f", "Failed"), machine("g", "Failed")]
    plan = plan_replicas(machine_set(3), machines, NOW)
    # excess 1 → the first in deletion order (a Failed one), then every Failed one, once each
    assert names(plan.delete) == ["f", "g"]


def test_failed_deleted_even_without_excess() -> None:
    machines = [machine("a"), machine("f", "Failed"), machine("b")]
    assert names(plan_replicas(machine_set(3), machines, NOW).delete) == ["f"]


def test_preserved_failed_machine_is_kept() -> None:
    machines = [
        machine("a"),
        machine("p", "Failed", preserve="auto-preserved", preserve_until=NOW + timedelta(hours=1)),
        machine("q", "Failed", preserve="when-failed"),
        machine("x", "Failed", preserve="now", preserve_until=NOW - timedelta(hours=1)),
        machine("y", "Failed", preserve_until=NOW + timedelta(hours=1)),  # annotation removed: over
    ]
    assert names(plan_replicas(machine_set(5), machines, NOW).delete) == ["x", "y"]


def test_burst_limits_creation_and_deletion() -> None:
    assert plan_replicas(machine_set(250), [], NOW).create == BURST_REPLICAS
    many = [machine(f"m{i:03d}", age=i) for i in range(150)]
    plan = plan_replicas(machine_set(0), many, NOW)
    assert len(plan.delete) == BURST_REPLICAS
    assert names(plan.delete)[0] == "m149"  # the oldest first
    failed = [machine(f"f{i:03d}", "Failed") for i in range(120)]
    assert len(plan_replicas(machine_set(120), failed, NOW).delete) == BURST_REPLICAS


def test_freeze_blocks_scale_up_only() -> None:
    frozen = machine_set(3, {FREEZE_LABEL_KEY: "True"})
    plan = plan_replicas(frozen, [machine("a")], NOW)
    assert (plan.create, plan.skipped, plan.diff) == (0, SKIP_FROZEN, -2)
    down = plan_replicas(machine_set(1, {FREEZE_LABEL_KEY: "True"}), [machine("a"), machine("b", age=1)], NOW)
    assert names(down.delete) == ["b"]
    # any other value is not a freeze
    assert plan_replicas(machine_set(2, {FREEZE_LABEL_KEY: "false"}), [], NOW).create == 2


def test_scale_up_disabled_label_blocks_scale_up() -> None:
    plan = plan_replicas(machine_set(2, {SCALE_UP_DISABLED_LABEL_KEY: "true"}), [], NOW)
    assert (plan.create, plan.skipped) == (0, SKIP_SCALE_UP_DISABLED)


# --- marked machines ------------------------------------------------------------------------------


def test_marked_for_deletion_up_to_the_scaler_change() -> None:
    ms = machine_set(3, scaler="2026-02-01T10:00:00Z")
    machines = [
        machine("before", priority="1", marked="2026-02-01T09:00:00Z"),
        machine("equal", priority="1", marked="2026-02-01T10:00:00Z"),
        machine("after", priority="1", marked="2026-02-01T11:00:00Z"),
        machine("not-triggered", priority="3", marked="2026-02-01T09:00:00Z"),
        machine("bad-time", priority="1", marked="yesterday"),
        machine("no-time", priority="1"),
    ]
    assert names(marked_for_deletion(machines, ms)) == ["before", "equal"]
    assert marked_for_deletion(machines, machine_set(3)) == []
    assert marked_for_deletion(machines, machine_set(3, scaler="x")) == []


def test_plan_deletes_marked_machines_without_excess() -> None:
    ms = machine_set(3, scaler="2026-02-01T10:00:00Z")
    machines = [machine("a"), machine("b"), machine("m", priority="1", marked="2026-02-01T09:00:00Z")]
    assert names(plan_replicas(ms, machines, NOW).delete) == ["m"]


# --- deletion order -------------------------------------------------------------------------------

ORDER_CASES: list[tuple[str, list[Machine], list[str]]] = [
    (
        "phase order",
        [
            machine(p.lower(), p)
            for p in (
                "Running",
                "Available",
                "Pending",
                "Unknown",
                "CrashLoopBackOff",
                "Failed",
                "Terminating",
            )
        ],
        ["terminating", "failed", "crashloopbackoff", "unknown", "pending", "available", "running"],
    ),
    ("a machine still being created ranks first", [machine("run"), machine("new", "")], ["new", "run"]),
    ("older first", [machine("young", age=1), machine("old", age=5)], ["old", "young"]),
    ("priority beats phase", [machine("p", "Pending"), machine("r", priority="2")], ["r", "p"]),
    ("default priority is 3", [machine("p4", priority="4"), machine("d")], ["d", "p4"]),
    (
        "an unparsable priority is 3",
        [machine("p4", priority="4"), machine("bad", priority="x")],
        ["bad", "p4"],
    ),
    (
        "earlier marked time first, unmarked last",
        [
            machine("late", priority="1", marked="2026-02-02T00:00:00Z"),
            machine("none", priority="1"),
            machine("early", priority="1", marked="2026-02-01T00:00:00Z"),
        ],
        ["early", "late", "none"],
    ),
    (
        "marked time beats phase",
        [machine("p", "Pending"), machine("r", marked="2026-02-01T00:00:00Z")],
        ["r", "p"],
    ),
    (
        "preserved last, whatever its priority",
        [machine("kept", "Failed", priority="1", preserve="now"), machine("r")],
        ["r", "kept"],
    ),
    ("name breaks a full tie", [machine("b"), machine("a")], ["a", "b"]),
]


@pytest.mark.parametrize(("name", "machines", "expected"), ORDER_CASES, ids=[c[0] for c in ORDER_CASES])
def test_deletion_order(name: str, machines: list[Machine], expected: list[str]) -> None:
    assert names(deletion_order(machines, NOW)) == expected


@pytest.mark.parametrize(
    ("value", "phase", "until", "expected"),
    [
        (None, "Running", None, False),
        ("now", "Running", None, True),
        ("auto-preserved", "Failed", None, True),
        ("when-failed", "Running", None, False),
        ("when-failed", "Failed", None, True),
        ("false", "Failed", None, False),
        # the annotation is gone: the preservation is over, whatever the expiry still says
        (None, "Failed", NOW + timedelta(seconds=1), False),
        ("when-failed", "Failed", NOW + timedelta(seconds=1), True),
        ("now", "Failed", NOW - timedelta(seconds=1), False),  # expired preservation wins
    ],
)
def test_is_preserved(value: str | None, phase: str, until: datetime | None, expected: bool) -> None:
    assert is_preserved(machine("m", phase, preserve=value, preserve_until=until), NOW) is expected


def test_machine_priority() -> None:
    assert machine_priority(machine("a")) == 3
    assert machine_priority(machine("a", priority="1")) == 1
    assert machine_priority(machine("a", priority="high")) == 3


# --- slow start -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "batches"),
    [(0, []), (1, [1]), (2, [1, 1]), (3, [1, 2]), (5, [1, 2, 2]), (7, [1, 2, 4]), (10, [1, 2, 4, 3]),
     (100, [1, 2, 4, 8, 16, 32, 37])],
)  # fmt: skip
def test_slow_start_batches(count: int, batches: list[int]) -> None:
    assert slow_start_batches(count) == batches
    assert sum(batches) == count


def failing_at(*calls: int) -> tuple[Callable[[], None], list[int]]:
    """A create function that fails on the given (1-based) calls, and the log of calls made."""
    made: list[int] = []

    def fn() -> None:
        made.append(len(made) + 1)
        if len(made) in calls:
            raise RuntimeError(f"call {len(made)} refused")

    return fn, made


@pytest.mark.parametrize(
    ("count", "fail_on", "successes", "calls"),
    [
        (10, (), 10, 10),
        (10, (1,), 0, 1),  # the first batch of one fails: nothing else is tried
        (10, (2,), 2, 3),  # the batch of two fails once: 1 + 1 succeeded, no third batch
        (10, (4,), 6, 7),  # a failure in the batch of four stops after that batch
        (10, (4, 5), 5, 7),
        (10, (8,), 9, 10),  # failure in the last batch
        (0, (1,), 0, 0),
    ],
)
def test_slow_start_stops_at_the_first_failing_batch(
    count: int, fail_on: tuple[int, ...], successes: int, calls: int
) -> None:
    fn, made = failing_at(*fail_on)
    ok, error = slow_start(count, fn)
    assert ok == successes
    assert len(made) == calls
    assert (error is None) == (not fail_on or count == 0)
    if error is not None:
        assert str(error) == f"call {fail_on[0]} refused"


def test_a_failed_machine_is_kept_by_its_nodes_annotation() -> None:
    """Upstream's shouldFailedMachineBeTerminated reads the Node: ``when-failed`` or ``now`` set on
    the Node keeps a Failed machine the machine controller has not preserved yet; a Node annotation
    removed (the machine remembers it as last-applied) ends it."""
    machines = [
        machine("a"),
        machine("kept", "Failed"),
        machine("ended", "Failed", annotations={LAST_APPLIED_NODE_PRESERVE_ANNOTATION: "when-failed"},
                preserve_until=NOW + timedelta(hours=1)),
        machine("plain", "Failed"),
        machine("unread", "Failed", preserve="false"),
    ]  # fmt: skip
    values = {"kept": "when-failed", "ended": "", "plain": ""}
    plan = plan_replicas(machine_set(5), machines, NOW, values, unread={"unread"})
    assert sorted(names(plan.delete)) == ["ended", "plain"]


def test_the_nodes_of_failed_machines_are_read_and_an_unreadable_one_keeps_its_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``failed_machines_node_values`` reads the Node of each Failed machine only; a Node that is
    gone gives no value (the machine's own applies), one that cannot be read names its machine."""
    from mcm_tasks.controllers.machineset import reconcile

    nodes: dict[str, Any] = {
        "n-asks": {"metadata": {"name": "n-asks", "annotations": {PRESERVE_ANNOTATION: "when-failed"}}},
        "n-plain": {"metadata": {"name": "n-plain"}},
    }
    read: list[str] = []

    def get_node(target: Any, name: str) -> Any:
        read.append(name)
        if name == "n-broken":
            raise ConnectionError("target unreachable")
        return nodes.get(name)

    monkeypatch.setattr(reconcile, "get_node", get_node)

    def on(node: str, name: str, phase: str = "Failed") -> Machine:
        m = machine(name, phase)
        return m.model_copy(update={"metadata": m.metadata.model_copy(update={"labels": {"node": node}})})

    machines = [
        on("n-asks", "asks"),
        on("n-plain", "plain"),
        on("n-gone", "gone"),
        on("n-broken", "broken"),
        on("n-running", "running", "Running"),
    ]
    values, unread = reconcile.failed_machines_node_values(None, machines)
    assert values == {"asks": "when-failed", "plain": ""}
    assert unread == {"broken"}
    assert "n-running" not in read


# --- mcm-tasks.io/deletion-order (issue 31) ----------------------------------------------------------

#: ages in minutes before T0: o is the oldest, n the newest; p is joining (Pending), u unhealthy
ORDER_FLEET = [
    ("o", "Running", 50),
    ("m", "Running", 30),
    ("n", "Running", 10),
    ("p", "Pending", 5),
    ("u", "Unknown", 1),
]


def fleet(**extra: dict[str, Any]) -> list[Machine]:
    return [machine(name, phase, age=age, **extra.get(name, {})) for name, phase, age in ORDER_FLEET]


@pytest.mark.parametrize(
    ("order", "extra", "first"),
    [
        # upstream: unhealthy, then joining, then the oldest Running
        (None, {}, ["u", "p", "o", "m", "n"]),
        # Oldest: the unhealthy first, then by age whatever the healthy phase (the joining one last)
        (DeletionOrder.OLDEST, {}, ["u", "o", "m", "n", "p"]),
        (DeletionOrder.NEWEST, {}, ["u", "p", "n", "m", "o"]),
        # marks still go first: priority, then the autoscaler's marked time, whatever the order
        (DeletionOrder.OLDEST, {"n": {"priority": "1"}}, ["n", "u", "o", "m", "p"]),
        (DeletionOrder.NEWEST, {"o": {"priority": "2"}}, ["o", "u", "p", "n", "m"]),
        (
            DeletionOrder.OLDEST,
            {"n": {"priority": "1", "marked": "2026-03-01T10:00:00Z"}, "m": {"priority": "1"}},
            ["n", "m", "u", "o", "p"],
        ),
        # preserved machines go last under any order
        (
            DeletionOrder.OLDEST,
            {"o": {"preserve": "now", "preserve_until": NOW + timedelta(hours=1)}},
            ["u", "m", "n", "p", "o"],
        ),
    ],
)
def test_deletion_order_with_a_policy(
    order: DeletionOrder | None, extra: dict[str, dict[str, Any]], first: list[str]
) -> None:
    assert names(deletion_order(fleet(**extra), NOW, order)) == first


def test_random_order_is_arbitrary_yet_the_same_on_every_pass() -> None:
    machines = [machine(f"r{i}", age=i) for i in range(12)]
    for m in machines:
        m.metadata.uid = f"uid-{m.metadata.name}"
    once = names(deletion_order(machines, NOW, DeletionOrder.RANDOM))
    assert names(deletion_order(list(reversed(machines)), NOW, DeletionOrder.RANDOM)) == once
    assert once != names(deletion_order(machines, NOW)) and sorted(once) == sorted(names(machines))
    sick = machine("sick", "CrashLoopBackOff")
    assert names(deletion_order([*machines, sick], NOW, DeletionOrder.RANDOM))[0] == "sick"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("Random", DeletionOrder.RANDOM), ("Newest", DeletionOrder.NEWEST), ("Oldest", "Oldest")],
)
def test_deletion_order_values(value: str | None, expected: Any) -> None:
    assert deletion_order_of(value) == expected


@pytest.mark.parametrize("value", ["oldest", "", "Youngest", "x" * 10_000])
def test_an_invalid_deletion_order_is_refused_with_a_short_message(value: str) -> None:
    with pytest.raises(ValueError, match="is not one of Random, Newest, Oldest") as err:
        deletion_order_of(value)
    assert len(str(err.value)) < 200


def test_plan_deletes_the_excess_in_the_sets_order() -> None:
    plan = plan_replicas(machine_set(3), fleet(), NOW, order=DeletionOrder.OLDEST)
    assert names(plan.delete) == ["u", "o"]
    assert names(plan_replicas(machine_set(3), fleet(), NOW).delete) == ["u", "p"]


# --- MCM #1078: priority 1 at unchanged replicas ---------------------------------------------------

MARK_OLD = (NOW - timedelta(seconds=60)).isoformat()
MARK_FRESH = (NOW - timedelta(seconds=3)).isoformat()


@pytest.mark.parametrize(
    ("scaler", "marked", "delete", "recheck_in"),
    [
        # no replica change accounts for the mark: replaced once the mark is older than the grace
        (None, MARK_OLD, ["b"], None),
        (None, MARK_FRESH, [], 12.0),
        # a replica change before the mark does not account for it
        ((NOW - timedelta(hours=1)).isoformat(), MARK_OLD, ["b"], None),
        # a change at or after the mark does: upstream's rule deletes it at once (the count dropped)
        (NOW.isoformat(), MARK_FRESH, ["b"], None),
        # a priority without a marked time is a hint for the next scale-down, not a deletion
        (None, None, [], None),
    ],
)
def test_a_machine_marked_with_priority_1_is_replaced_at_unchanged_replicas(
    scaler: str | None, marked: str | None, delete: list[str], recheck_in: float | None
) -> None:
    machines = [machine("a"), machine("b", priority="1", marked=marked), machine("c")]
    plan = plan_replicas(machine_set(3, scaler=scaler), machines, NOW, marked_grace=15.0)
    assert names(plan.delete) == delete
    assert plan.create == 0
    assert plan.recheck_in == (pytest.approx(recheck_in) if recheck_in is not None else None)


def test_a_replaced_marked_machine_is_not_deleted_twice_with_the_excess() -> None:
    machines = [machine("a"), machine("b", priority="1", marked=MARK_OLD), machine("c")]
    assert names(plan_replicas(machine_set(2), machines, NOW, marked_grace=15.0).delete) == ["b"]


def test_marked_machines_are_replaced_one_at_a_time() -> None:
    machines = [
        machine("a", priority="1", marked=MARK_OLD),
        machine("b", priority="1", marked=MARK_OLD),
        machine("c"),
    ]
    plan = plan_replicas(machine_set(3), machines, NOW, marked_grace=15.0)
    assert names(plan.delete) == ["a"] and names(plan.replacing) == ["a"]


@pytest.mark.parametrize(
    "busy", [machine("new", ""), machine("joining", "Pending"), machine("going", deleting=True)]
)
def test_no_replacement_while_a_machine_of_the_set_comes_or_goes(busy: Machine) -> None:
    machines = [machine("a", priority="1", marked=MARK_OLD), machine("c"), busy]
    plan = plan_replicas(machine_set(3), machines, NOW, marked_grace=15.0)
    assert "a" not in names(plan.delete) and not plan.replacing


def test_a_marked_machine_the_excess_takes_is_no_replacement() -> None:
    machines = [machine("a"), machine("b", priority="1", marked=MARK_OLD), machine("c")]
    plan = plan_replicas(machine_set(2), machines, NOW, marked_grace=15.0)
    assert names(plan.delete) == ["b"] and not plan.replacing
