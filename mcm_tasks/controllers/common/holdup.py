"""Which machines hold a MachineSet or MachineDeployment up, and why, in words (pure).

A set or deployment waits for its machines; MCM says so only as counts (``readyReplicas 1/3``). Both
the rollout conditions (``RollingOut``, ``ScalingUp``, ``ScalingDown``) and ``mcm-tasks admin why``
name the machines instead: "2 machines Pending: md-abc-x (creating VM, 40 s), md-abc-y (waiting for
Node)". One function says what a single machine waits for (``machine_wait``), one groups them into
the message (``holdup_message``), so the object and the CLI say the same thing.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from mcm_tasks.api import Machine, MachinePhase

#: at most this many machines are named in a condition message (the rest are counted)
NAMED_IN_MESSAGE = 5


@dataclass(frozen=True)
class MachineWait:
    """One machine that is not (yet) serving: its phase, what it waits for, for how long."""

    name: str
    #: the phase as MCM writes it, ``Pending`` for a machine that has none yet
    phase: str
    #: short words: "creating VM", "waiting for Node", "deleting: Drain the node"
    waits_for: str
    #: seconds since the wait began (the machine's creation, or its last status change)
    seconds: float
    #: MCM's ``lastOperation.description``, whole
    description: str


def _seconds(since: datetime | None, now: datetime) -> float:
    return 0.0 if since is None else max((now - since).total_seconds(), 0.0)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _micros(when: datetime) -> int:
    """Microseconds since the epoch, exactly (a time without a zone is taken as UTC)."""
    return (when - (_EPOCH if when.tzinfo is not None else _EPOCH.replace(tzinfo=None))) // _MICROSECOND


@dataclass(frozen=True, slots=True)
class Wait:
    """What a machine waits for, without the clock: ``machine_wait`` is ``wait_of(machine).at(now)``.
    A function of the machine alone, so a caller that keeps machines per version (the MachineSet's
    facts) decides it once per version and asks only the time on each pass."""

    name: str
    phase: str
    waits_for: str
    #: when the wait began (``MachineWait.seconds`` counts from it)
    since: datetime | None
    description: str
    #: ``since`` in microseconds since the epoch: a set's scaling condition compares thousands of
    #: starts with the pass's time on every pass, and a parsed time's zone (pydantic's) made each
    #: comparison of datetimes a call into it; decided once per machine version with the rest
    since_us: int | None = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "since_us", None if self.since is None else _micros(self.since))

    def at(self, now: datetime) -> MachineWait:
        return MachineWait(self.name, self.phase, self.waits_for, _seconds(self.since, now), self.description)


_WORDS: dict[str, str] = {
    MachinePhase.AVAILABLE: "node registered, waiting for Ready",
    MachinePhase.UNKNOWN: "unhealthy, waiting for the health timeout",
    MachinePhase.FAILED: "failed, to be replaced",
    MachinePhase.CRASH_LOOP_BACK_OFF: "creation failing, retried until the creation timeout",
    MachinePhase.TERMINATING: "terminating",
    MachinePhase.IN_PLACE_UPDATING: "updating in place",
    MachinePhase.IN_PLACE_UPDATE_SUCCESSFUL: "updated in place, waiting to be uncordoned",
    MachinePhase.IN_PLACE_UPDATE_FAILED: "in-place update failed",
}


def wait_of(machine: Machine) -> Wait | None:
    """What the machine waits for, or None when it serves (Running, not being deleted)."""
    status = machine.status
    phase = str(status.current_status.phase or "")
    description = status.last_operation.description
    changed = status.current_status.last_update_time or status.last_operation.last_update_time
    since = changed or machine.metadata.creation_timestamp
    name = machine.metadata.name or ""
    if machine.metadata.is_deleting:
        step = description or "deletion begins"
        return Wait(name, phase or "Terminating", f"deleting: {step}", since, description)
    if phase == MachinePhase.RUNNING:
        return None
    if phase in ("", MachinePhase.PENDING):
        created = machine.metadata.creation_timestamp
        if not machine.spec.provider_id:
            return Wait(name, "Pending", "creating VM", created, description)
        return Wait(name, "Pending", "waiting for Node", created, description)
    return Wait(name, phase, _WORDS.get(phase, phase), since, description)


def machine_wait(machine: Machine, now: datetime) -> MachineWait | None:
    """What the machine waits for, or None when it serves (Running, not being deleted)."""
    wait = wait_of(machine)
    return None if wait is None else wait.at(now)


def holding(machines: Iterable[Machine], now: datetime) -> list[MachineWait]:
    """The machines that do not serve, longest-waiting first."""
    return holding_waits((w for m in machines if (w := wait_of(m)) is not None), now)


def holding_waits(waits: Iterable[Wait], now: datetime) -> list[MachineWait]:
    """``holding`` of machines whose ``wait_of`` the caller has already."""
    return sorted((w.at(now) for w in waits), key=lambda w: (-w.seconds, w.name))


def _duration(seconds: float, coarse: bool = False) -> str:
    s = int(seconds)
    if coarse and s < 60:
        return "under 1 min"
    if coarse and s < 120:
        return "1 min"
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h"


def holdup_message(
    waits: Sequence[MachineWait], limit: int = NAMED_IN_MESSAGE, *, coarse: bool = False
) -> str:
    """ "2 machines Pending: a (creating VM, 40 s), b (waiting for Node, 3 s); 1 machine Failed: c
    (failed, to be replaced, 5 min)", phases in order of their first machine; at most ``limit``
    machines are named, the rest counted. ``coarse``: whole minutes ("under 1 min", "3 min"), for a
    condition message, which is written whenever it changes: a message that ticked every second
    would rewrite the status on every pass of a scale-up."""
    groups: dict[str, list[MachineWait]] = {}
    for w in waits:
        groups.setdefault(w.phase, []).append(w)
    return _message(((phase, len(members), members) for phase, members in groups.items()), limit, coarse)


def _message(groups: Iterable[tuple[str, int, Sequence[MachineWait]]], limit: int, coarse: bool) -> str:
    """The message of phases in order, each with its count and its first members (longest-waiting
    first): at most ``limit`` machines named in all, the rest counted."""
    named = 0
    parts = []
    for phase, count, members in groups:
        shown = []
        for w in members:
            if named >= limit:
                break
            shown.append(f"{w.name} ({w.waits_for}, {_duration(w.seconds, coarse)})")
            named += 1
        noun = "machine" if count == 1 else "machines"
        more = count - len(shown)
        tail = (", " if shown else "") + f"{more} more" if more else ""
        parts.append(f"{count} {noun} {phase}: " + ", ".join(shown) + tail)
    return "; ".join(parts)


def waits_message(
    waits: Iterable[Wait], now: datetime, limit: int = NAMED_IN_MESSAGE, *, coarse: bool = False
) -> str:
    """``holdup_message(holding_waits(waits, now), limit, coarse=coarse)``, to the letter, without a
    ``MachineWait`` per machine and without sorting them all: a MachineSet's scaling condition asks
    it on every pass, and at 10 000 machines coming up that was a sort of thousands of new objects
    (17 ms a pass, more with parsed times) to name five of them. Longest-waiting first is earliest
    start first, ties by name, then as given (``sorted`` is stable, and so is ``heapq.nsmallest``);
    a start in the future, or none, waits 0 s, after every start in the past. Each phase keeps its
    ``limit`` first members, and the phases go in order of their first."""
    now_us = _micros(now)
    waits = waits if isinstance(waits, Sequence) else list(waits)
    #: phase → (its waits that started before now, the others), each in the order given
    groups: dict[str, tuple[list[Wait], list[Wait]]] = {}
    for w in waits:
        group = groups.get(w.phase)
        if group is None:
            group = groups[w.phase] = ([], [])
        since = w.since_us
        group[0 if since is not None and since < now_us else 1].append(w)
    ordered: list[tuple[tuple[int | str, ...], str, int, list[Wait]]] = []
    for phase, (past, rest) in groups.items():
        first = heapq.nsmallest(max(limit, 1), past, key=_SINCE_AND_NAME)
        if len(first) < max(limit, 1):
            first += heapq.nsmallest(max(limit, 1) - len(first), rest, key=_NAME)
        head = first[0]
        since = head.since_us if head.since_us is not None and head.since_us < now_us else now_us
        # the phase's place: its first member's start and name (and, below, place among the waits)
        ordered.append(((since, head.name), phase, len(past) + len(rest), first))
    if len({group[0] for group in ordered}) < len(ordered):  # equal names in two phases: rare
        ordered = [
            ((*key, next(i for i, w in enumerate(waits) if w is first[0])), phase, count, first)
            for key, phase, count, first in ordered
        ]
    ordered.sort(key=lambda group: group[0])

    def at(w: Wait) -> MachineWait:  # ``w.at(now)``, from the integer start
        since = w.since_us if w.since_us is not None and w.since_us < now_us else now_us
        seconds = (now_us - since) / 1_000_000  # what timedelta.total_seconds gives, exactly
        return MachineWait(w.name, w.phase, w.waits_for, seconds, w.description)

    return _message(
        ((phase, count, [at(w) for w in first]) for _, phase, count, first in ordered), limit, coarse
    )


_SINCE_AND_NAME = operator.attrgetter("since_us", "name")
_NAME = operator.attrgetter("name")
