"""manageReplicas as pure decisions: how many machines to create, which ones to delete and in what
order, and how creations are batched.

One pass either creates or deletes, never both (as upstream): the expectations it records are of
one kind. Scale-up: ``min(replicas − non-terminating, 100)`` machines, unless the set carries the
``freeze=True`` label (the overshooting safety froze it) or the in-place update's scale-up-disabled
label. Otherwise machines to delete, up to 100: the excess in deletion order, the machines the
autoscaler marked (priority 1, marked no later than the set's last scaler change), and every Failed
machine that is not preserved (upstream's ``shouldFailedMachineBeTerminated``, on the Machine's and
its Node's preserve annotation; it is replaced on the next pass).

Deletion order, first deleted first: not preserved before preserved; lower ``machinepriority``
(default 3); earlier marked-for-deletion time; phase Terminating < Failed < CrashLoopBackOff < Unknown <
Pending < Available < Running (a machine still being created, with no phase, ranks with Terminating,
as in MCM where an unknown phase ranks 0); older first; then by name, so the order is total.

The annotation ``mcm-tasks.io/deletion-order`` on the set or its deployment (Cluster API's
``deletePolicy``) changes the last part of that order among machines that are healthy or joining
(Pending, Available, Running): ``Oldest`` deletes the oldest of them first, whatever their phase;
``Newest`` the newest; ``Random`` an arbitrary one (a hash of the machine's uid: arbitrary, yet the same
choice on every pass, so a scale-down in batches never changes its mind). Preserved machines, the
priority annotation, the autoscaler's marks and the unhealthy phases still come first, as upstream;
absent (or invalid), the order is upstream's.

MCM #1078: a machine marked for deletion with priority 1 that no replica change accounts for (the
replica count did not drop, or dropped before it was marked) is deleted all the same, and so replaced,
once its mark is ``short_retry`` old: the grace lets a deployment that marks machines and then lowers
the set's replicas finish its pass, so the mark and the scale-down remain one deletion. Such
replacements go one at a time, none while another machine of the set is going or coming
(``one_replacement_at_a_time``).

Deliberate difference: a machine with a deletionTimestamp counts as terminating even before its phase
says so. MCM counts it as active until the phase changes, which can hold a replacement back and, when
the status write after the DELETE fails, leaves the set waiting on an expectation nothing will meet.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final

from mcm_tasks.api import Machine, MachinePhase, MachineSet
from mcm_tasks.api.constants import (
    FREEZE_LABEL_KEY,
    FREEZE_LABEL_VALUE,
    LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION,
    MACHINE_PRIORITY_ANNOTATION,
    MACHINE_PRIORITY_DEFAULT,
    MACHINE_PRIORITY_TRIGGERED,
    MARKED_FOR_DELETION_TIME_ANNOTATION,
    SCALE_UP_DISABLED_LABEL_KEY,
)
from mcm_tasks.controllers.common.preservation import is_preserved, should_failed_machine_be_terminated
from mcm_tasks.controllers.machineset.facts import Census, census_of, direct

#: at most this many creations or deletions per pass (MCM's BurstReplicas)
BURST_REPLICAS: Final = 100
#: the first slow-start batch
SLOW_START_INITIAL_BATCH_SIZE: Final = 1

#: lower goes first; phases not listed (none yet, in-place update phases) rank 0
PHASE_DELETION_RANK: Final[dict[str, int]] = {
    MachinePhase.TERMINATING: 0,
    MachinePhase.FAILED: 1,
    MachinePhase.CRASH_LOOP_BACK_OFF: 2,
    MachinePhase.UNKNOWN: 3,
    MachinePhase.PENDING: 4,
    MachinePhase.AVAILABLE: 5,
    MachinePhase.RUNNING: 6,
}

_LATEST: Final = datetime.max.replace(tzinfo=UTC)

SKIP_FROZEN: Final = "frozen"
SKIP_SCALE_UP_DISABLED: Final = "scale-up-disabled"
SKIP_IN_TRANSFER: Final = "machine in transfer"


# --- machine predicates ----------------------------------------------------------------------------------


def phase_of(machine: Machine) -> str:
    """The phase as a string (a ``MachinePhase`` member is one: no conversion on this hot path)."""
    return machine.status.current_status.phase


def is_terminating(machine: Machine) -> bool:
    return (
        machine.metadata.deletion_timestamp is not None
        or machine.status.current_status.phase == MachinePhase.TERMINATING
    )


def is_failed(machine: Machine) -> bool:
    return phase_of(machine) == MachinePhase.FAILED


def is_active(machine: Machine) -> bool:
    """MCM's IsMachineActive: neither terminating nor failed (these get template propagation)."""
    return not is_terminating(machine) and not is_failed(machine)


def machine_priority(machine: Machine) -> int:
    """The ``machinepriority`` annotation; the default (3) when absent or not a number, as MCM."""
    raw = machine.metadata.annotations.get(MACHINE_PRIORITY_ANNOTATION, MACHINE_PRIORITY_DEFAULT)
    try:
        return int(raw)
    except ValueError:
        return int(MACHINE_PRIORITY_DEFAULT)


def parse_rfc3339(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def marked_for_deletion_time(machine: Machine) -> datetime | None:
    return parse_rfc3339(machine.metadata.annotations.get(MARKED_FOR_DELETION_TIME_ANNOTATION))


# --- deletion order --------------------------------------------------------------------------------------


class DeletionOrder(StrEnum):
    """The values of ``mcm-tasks.io/deletion-order`` (Cluster API's deletePolicy)."""

    RANDOM = "Random"
    NEWEST = "Newest"
    OLDEST = "Oldest"


def deletion_order_of(value: str | None) -> DeletionOrder | None:
    """The order an annotation's value asks for; None when absent. Raises ValueError for another
    value (the set's pass reports it and keeps upstream's order)."""
    if value is None:
        return None
    try:
        return DeletionOrder(value)
    except ValueError:
        allowed = ", ".join(o.value for o in DeletionOrder)
        raise ValueError(f"deletion order {value[:64]!r} is not one of {allowed}") from None


#: the rank the healthy or joining phases share under a deletion order
_HEALTHY_RANK: Final = PHASE_DELETION_RANK[MachinePhase.PENDING]


def _policy_key(machine: Machine, order: DeletionOrder) -> tuple[int, float | str]:
    """(phase rank, the order's own key): unhealthy phases keep their ranks, healthy ones share one."""
    rank = min(PHASE_DELETION_RANK.get(phase_of(machine), 0), _HEALTHY_RANK)
    created = (machine.metadata.creation_timestamp or _LATEST).timestamp()
    if order is DeletionOrder.OLDEST:
        return rank, created
    if order is DeletionOrder.NEWEST:
        return rank, -created
    seed = machine.metadata.uid or machine.metadata.name or ""
    return rank, hashlib.sha256(seed.encode()).hexdigest()


def deletion_key(
    machine: Machine, now: datetime, order: DeletionOrder | None = None
) -> tuple[bool, int, datetime, tuple[int, float | str], str]:
    if order is None:
        rest: tuple[int, float | str] = (
            PHASE_DELETION_RANK.get(phase_of(machine), 0),
            (machine.metadata.creation_timestamp or _LATEST).timestamp(),
        )
    else:
        rest = _policy_key(machine, order)
    return (
        is_preserved(machine, now),
        machine_priority(machine),
        marked_for_deletion_time(machine) or _LATEST,
        rest,
        machine.metadata.name or "",
    )


def deletion_order(
    machines: Iterable[Machine], now: datetime, order: DeletionOrder | None = None
) -> list[Machine]:
    """Upstream: ``getMachinesToDelete``; ``order`` is the set's ``mcm-tasks.io/deletion-order``."""
    return sorted(machines, key=lambda m: deletion_key(m, now, order))


def marked_for_deletion(machines: Iterable[Machine], machine_set: MachineSet) -> list[Machine]:
    """Machines the autoscaler triggered for deletion (priority 1) whose marked time is not after the
    set's last-deployment-replica-change-by-scaler time: the replica count already accounts for them.

    Upstream: ``getMachinesMarkedForDeletion``."""
    changed = parse_rfc3339(
        machine_set.metadata.annotations.get(LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION)
    )
    if changed is None:
        return []
    out = []
    for machine in machines:
        if machine.metadata.annotations.get(MACHINE_PRIORITY_ANNOTATION) != MACHINE_PRIORITY_TRIGGERED:
            continue
        marked = marked_for_deletion_time(machine)
        if marked is not None and marked <= changed:
            out.append(machine)
    return out


def marked_without_replica_change(
    machines: Iterable[Machine], machine_set: MachineSet, now: datetime, grace: float
) -> tuple[list[Machine], float | None]:
    """MCM #1078: machines triggered for deletion (priority 1) that no replica change by the scaler
    accounts for, once their mark is ``grace`` seconds old (a priority without a marked time is
    someone's hint for the next scale-down, and stays one); and
    the seconds until the next younger mark comes of age (None: none waits)."""
    changed = parse_rfc3339(
        machine_set.metadata.annotations.get(LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION)
    )
    out: list[Machine] = []
    due: list[float] = []
    for machine in machines:
        if machine.metadata.annotations.get(MACHINE_PRIORITY_ANNOTATION) != MACHINE_PRIORITY_TRIGGERED:
            continue
        marked = marked_for_deletion_time(machine)
        if marked is None:  # a priority set by hand only ranks the machine first at a scale-down
            continue
        if changed is not None and marked <= changed:
            continue  # the replica change accounts for it: ``marked_for_deletion``
        age = (now - marked).total_seconds()
        if age >= grace:
            out.append(machine)
        else:
            due.append(grace - age)
    return out, (min(due) if due else None)


def one_replacement_at_a_time(
    machines: Sequence[Machine], due: Sequence[Machine], now: datetime, order: DeletionOrder | None
) -> list[Machine]:
    """The budget of MCM #1078's replacements: one at a time, and none while any machine of the set
    is going (terminating) or coming (no phase yet, Pending): a fleet the autoscaler marked wholesale
    is replaced machine by machine, never emptied at once. The set's own machine events wake it."""
    if not due:
        return []
    busy = any(is_terminating(m) or phase_of(m) in ("", MachinePhase.PENDING) for m in machines)
    return [] if busy else deletion_order(due, now, order)[:1]


# --- the plan --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaPlan:
    #: machines to create in this pass
    create: int = 0
    #: machines to delete in this pass, in order
    delete: tuple[Machine, ...] = ()
    #: why a needed scale-up is not done ("" when it is, or none is needed)
    skipped: str = ""
    #: non-terminating machines − replicas
    diff: int = 0
    #: seconds until a machine marked for deletion without a replica change is due (None: none waits)
    recheck_in: float | None = None
    #: of ``delete``, the marked machines replaced at unchanged replicas (MCM #1078), for their Event
    replacing: tuple[Machine, ...] = ()


def is_frozen(machine_set: MachineSet) -> bool:
    """The overshooting freeze blocks scale-up of a set that is not being deleted."""
    frozen = machine_set.metadata.labels.get(FREEZE_LABEL_KEY) == FREEZE_LABEL_VALUE
    return frozen and not machine_set.metadata.is_deleting


def plan_replicas(
    machine_set: MachineSet,
    machines: Sequence[Machine],
    now: datetime,
    node_values: Mapping[str, str] | None = None,
    unread: Collection[str] = (),
    *,
    order: DeletionOrder | None = None,
    marked_grace: float = 0.0,
    census: Census | None = None,
) -> ReplicaPlan:
    """manageReplicas' decision over the set's claimed machines, in the set's deletion ``order``. A
    machine an in-place update is moving between sets (labelled ``update-result``) holds the set
    still: its deployment counts it into the new set's replicas next, and until then neither creating
    nor deleting would be right.

    A Failed machine is replaced unless ``should_failed_machine_be_terminated`` keeps it, on its
    Node's preserve annotation (``node_values``: machine name → the Node's value, "" for none; a
    machine not in it has no Node to read). A Failed machine named in ``unread`` (its Node could not
    be read) is kept for this pass: upstream deletes it, but a passing read error is no reason to
    destroy a machine someone asked to keep; the next pass decides.

    ``census``: the machines' census (``facts.census_of``), when the caller has it (taken here
    otherwise); only the machines it flags are looked at further."""
    found = census if census is not None else census_of(machines, direct(machine_set))
    active = list(found.active)
    if found.in_transfer:
        return ReplicaPlan(skipped=SKIP_IN_TRANSFER)
    diff = len(active) - machine_set.spec.replicas
    if diff < 0:
        if is_frozen(machine_set):
            return ReplicaPlan(skipped=SKIP_FROZEN, diff=diff)
        if SCALE_UP_DISABLED_LABEL_KEY in machine_set.metadata.labels:
            return ReplicaPlan(skipped=SKIP_SCALE_UP_DISABLED, diff=diff)
        return ReplicaPlan(create=min(-diff, BURST_REPLICAS), diff=diff)
    stale: list[Machine] = []
    if diff > 0:
        stale += deletion_order(active, now, order)[: min(diff, BURST_REPLICAS)]
    # both look only at the machines the autoscaler triggered for deletion
    stale += marked_for_deletion(found.triggered, machine_set)
    replaced, recheck_in = marked_without_replica_change(found.triggered, machine_set, now, marked_grace)
    replaced = one_replacement_at_a_time(machines, [m for m in replaced if m not in stale], now, order)
    stale += replaced
    values = node_values or {}
    stale += [
        m
        for m in found.failed
        if (m.metadata.name or "") not in unread
        and should_failed_machine_be_terminated(m, values.get(m.metadata.name or ""), now)
    ]
    unique: dict[str, Machine] = {}
    for machine in stale:
        unique.setdefault(machine.metadata.name or "", machine)
    return ReplicaPlan(
        delete=tuple(list(unique.values())[:BURST_REPLICAS]),
        diff=diff,
        recheck_in=recheck_in,
        replacing=tuple(replaced),
    )


# --- slow start ------------------------------------------------------------------------------------------


def slow_start_batches(count: int, initial: int = SLOW_START_INITIAL_BATCH_SIZE) -> list[int]:
    """Batch sizes 1, 2, 4, … that add up to ``count`` (the last one is what remains)."""
    sizes, remaining, size = [], count, min(count, initial)
    while size > 0:
        sizes.append(size)
        remaining -= size
        size = min(2 * size, remaining)
    return sizes


#: runs ``fn`` ``n`` times (concurrently, for the real thing) and returns each call's error or None
BatchRunner = Callable[[int, Callable[[], None]], list[Exception | None]]


def run_sequentially(n: int, fn: Callable[[], None]) -> list[Exception | None]:
    results: list[Exception | None] = []
    for _ in range(n):
        try:
            fn()
            results.append(None)
        except Exception as err:
            results.append(err)
    return results


def slow_start(
    count: int,
    fn: Callable[[], None],
    run_batch: BatchRunner = run_sequentially,
    initial: int = SLOW_START_INITIAL_BATCH_SIZE,
) -> tuple[int, Exception | None]:
    """MCM's slowStartBatch: call ``fn`` ``count`` times in doubling batches; a batch with a failure
    is the last one. Returns (successful calls, the first error). A quota that refuses every create
    costs one call, not a hundred."""
    successes = 0
    for size in slow_start_batches(count, initial):
        errors = [e for e in run_batch(size, fn) if e is not None]
        successes += size - len(errors)
        if errors:
            return successes, errors[0]
    return successes, None
