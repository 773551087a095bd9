"""Which machines hold a MachineSet or MachineDeployment up, and why, in words (pure).

A set or deployment waits for its machines; MCM says so only as counts (``readyReplicas 1/3``). Both
the rollout conditions (``RollingOut``, ``ScalingUp``, ``ScalingDown``) and ``mcm-tasks admin why``
name the machines instead: "2 machines Pending: md-abc-x (creating VM, 40 s), md-abc-y (waiting for
Node)". One function says what a single machine waits for (``machine_wait``), one groups them into
the message (``holdup_message``), so the object and the CLI say the same thing.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

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
    named = 0
    parts = []
    for phase, members in groups.items():
        shown = []
        for w in members:
            if named >= limit:
                break
            shown.append(f"{w.name} ({w.waits_for}, {_duration(w.seconds, coarse)})")
            named += 1
        noun = "machine" if len(members) == 1 else "machines"
        more = len(members) - len(shown)
        tail = (", " if shown else "") + f"{more} more" if more else ""
        parts.append(f"{len(members)} {noun} {phase}: " + ", ".join(shown) + tail)
    return "; ".join(parts)


def waits_message(
    waits: Iterable[Wait], now: datetime, limit: int = NAMED_IN_MESSAGE, *, coarse: bool = False
) -> str:
    """``holdup_message(holding_waits(waits, now), limit, coarse=coarse)``, to the letter, without a
    ``MachineWait`` per machine and without sorting them all: a MachineSet's scaling condition asks
    it on every pass, and at 10 000 machines coming up that was a sort of thousands of new objects
    (17 ms a pass) to name five of them. Longest-waiting first is earliest start first (a start in
    the future, or none, waits 0 s), ties by name; each phase keeps its ``limit`` first members,
    and the phases go in order of their first (ties as given, as ``sorted`` keeps them)."""
    groups: dict[str, list[tuple[datetime, str, int, Wait]]] = {}
    for index, w in enumerate(waits):
        since = w.since
        start = since if since is not None and since < now else now
        groups.setdefault(w.phase, []).append((start, w.name, index, w))
    ordered = []
    for phase, members in groups.items():
        first = heapq.nsmallest(max(limit, 1), members, key=_order)
        ordered.append((_order(first[0]), phase, len(members), first))
    ordered.sort(key=lambda group: group[0])
    named = 0
    parts = []
    for _first, phase, count, first in ordered:
        shown = []
        for start, _name, _index, w in first:
            if named >= limit:
                break
            seconds = _seconds(start, now)
            shown.append(f"{w.name} ({w.waits_for}, {_duration(seconds, coarse)})")
            named += 1
        noun = "machine" if count == 1 else "machines"
        more = count - len(shown)
        tail = (", " if shown else "") + f"{more} more" if more else ""
        parts.append(f"{count} {noun} {phase}: " + ", ".join(shown) + tail)
    return "; ".join(parts)


def _order(member: tuple[datetime, str, int, Wait]) -> tuple[datetime, str, int]:
    """Longest-waiting first, then by name, then as given (``holding_waits`` sorts stably)."""
    return member[0], member[1], member[2]
