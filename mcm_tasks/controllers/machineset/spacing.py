"""How soon a MachineSet's next pass may start: passes spaced by their own cost (issue 33).

A pass reads every machine of its set, so its cost grows with the set, and a set whose machines
keep changing (a scale-up, a rollout) is passed again as soon as the batch period lets it. At 10 000
machines a pass took 0.6-1.4 s and the passes ran back to back for the whole phase: their count grew
with the phase and their cost with the set, a total that grows with the square of the set
(docs/performance.md, "10 000 machines"). With ``--machine-set-pass-spacing`` k, a pass that took
d seconds of CPU lets the next one start k·d after it ended, so a set's passes take at most 1/(k+1)
of a worker's CPU whatever its size: the count falls as the cost grows, and the total stays linear.
CPU, not wall time: a pass waiting on a loaded API server or host is not what grows with the set.

Only the passes that recount are spaced: a pass that created or deleted machines lets the next one
come as soon as before (``spacing_io.acted``), since a scale-down deletes a batch a pass and spacing
those passes halved its rate at 10 000 machines.

**The recount floor** (``--machine-set-recount-interval``, 2 s): a pass that only recounted lets
the next pass woken by its machines' changes start no sooner than the interval after it. The wakes
wait in the delayed set (the queue contract's SCHEDULE_BATCHED), so they cost no task. Fifty sets
of twenty machines scaled at once ran a recount per set every 1.2 s, each with a status write and a
MachineDeployment pass after it: a third of the tasks of a seed's scale-up. A set whose deployment
rolls (another set of the deployment has replicas, ``rolling``) is not floored: each surge step of
a rollout waits on its counts, and a longer wait per step slowed the rollout of 300 from 15.5 s to
20.3 s. A pass that acted lifts the floor; the set's own changes wake it at once.

Below the batch period nothing changes: a pass of a thousand machines (4-70 ms) spaced by k = 3
still waits for ``--machine-updates-batch-period`` (0.5 s) first, so rollouts and scale-ups of
ordinary sets run as before. What a pass held back costs: the change it would have acted on waits
up to k·d (at 10 000 machines about two seconds), and one short task that hands the key back.
"""

from __future__ import annotations

from collections.abc import Iterable

from mcm_tasks.api import MachineSet


def spacing(took: float, factor: float, batch_period: float) -> float:
    """Seconds after a pass that took ``took`` before the set's next may start; 0 when the batch
    period already spaces them at least as far (or spacing is off, ``factor`` 0)."""
    delay = factor * max(took, 0.0)
    return delay if factor > 0 and delay > batch_period else 0.0


def held_back(not_before: float | None, now: float) -> float:
    """Seconds a pass starting ``now`` still has to wait for ``not_before``; 0: it may run."""
    return 0.0 if not_before is None or not_before <= now else not_before - now


def rolling(machine_set: MachineSet, siblings: Iterable[MachineSet]) -> bool:
    """Whether another set of the set's deployment (``siblings``: every set the deployment owns)
    holds replicas, in its spec or its status: a rollout or a rollback in flight."""
    uid = machine_set.metadata.uid
    return any(
        other.metadata.uid != uid and (other.spec.replicas > 0 or other.status.replicas > 0)
        for other in siblings
    )
