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

Below the batch period nothing changes: a pass of a thousand machines (4-70 ms) spaced by k = 3
still waits for ``--machine-updates-batch-period`` (0.5 s) first, so rollouts and scale-ups of
ordinary sets run as before. What a pass held back costs: the change it would have acted on waits
up to k·d (at 10 000 machines about two seconds), and one short task that hands the key back.
"""

from __future__ import annotations


def spacing(took: float, factor: float, batch_period: float) -> float:
    """Seconds after a pass that took ``took`` before the set's next may start; 0 when the batch
    period already spaces them at least as far (or spacing is off, ``factor`` 0)."""
    delay = factor * max(took, 0.0)
    return delay if factor > 0 and delay > batch_period else 0.0


def held_back(not_before: float | None, now: float) -> float:
    """Seconds a pass starting ``now`` still has to wait for ``not_before``; 0: it may run."""
    return 0.0 if not_before is None or not_before <= now else not_before - now
