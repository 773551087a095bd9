"""A pass as a list of phases folded by one function, as Cluster API's machine controller runs its
``reconcilePhases`` in ``doReconcile``: each phase is a function of the pass's scope (``PassScope``),
reads and writes through it, and answers when the object wants its next pass; ``run_phases`` runs
them in order and answers the soonest of their requeues (Cluster API's ``LowestNonZeroResult``).

A phase may end the pass where it stands (``Halt``): the object is being deleted, the controller is
frozen, its input is invalid. Cluster API lets every phase run and aggregates their errors; an error
here propagates at once, as upstream MCM's ``reconcileClusterMachine`` returns on the first, and the
queue contract backs off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.queue import Requeue

S = TypeVar("S", bound=PassScope[Any])


@dataclass(frozen=True)
class Halt:
    """A phase's word that the pass ends here, answering ``requeue`` (None: nothing to come back
    for); the phases after it do not run."""

    requeue: Requeue | None = None


#: what a phase answers: when to come back (None: it has no wish of its own), or ``Halt``
PhaseResult = Requeue | Halt | None
Phase = Callable[[S], PhaseResult]


def earliest(requeues: Iterable[Requeue | None]) -> Requeue:
    """The soonest requeue, carrying every note (a hold's reason) of the pass; LongRetry when no
    phase asked for one (MCM's resync of a settled object)."""
    found = [r for r in requeues if r is not None]
    if not found:
        return Requeue.long()
    soonest = min(found, key=lambda r: r.after)
    note = "; ".join(r.note for r in found if r.note)
    return Requeue(soonest.after, note) if note != soonest.note else soonest


def run_phases(scope: S, phases: Sequence[Phase[S]]) -> Requeue | None:
    """Run ``phases`` in order over ``scope``: the soonest requeue any asked for (``earliest``), or
    what the phase that halted the pass answered."""
    requeues: list[Requeue | None] = []
    for phase in phases:
        result = phase(scope)
        if isinstance(result, Halt):
            return result.requeue
        requeues.append(result)
    return earliest(requeues)
