"""Coalescing of the event-triggered safety jobs: at most one full run per job and window.

The informer asks for ``orphan-vms`` on every Machine deletion and for ``overshooting`` on every
Machine creation, so scaling a deployment by N machines asks for N full scans of the installation.
Each scan re-reads every Machine, VM or MachineSet, and none of them learns more than the last one
did: a scan started after the last event of a burst covers the whole burst. Measured on 1000 → 0
replicas, the scans were a quarter of the workers' CPU and found nothing to do.

So after a full run a job's *window* stays closed for ``safety_event_min_interval`` (measured from
the run's start). A request that finds it closed does not scan but returns ``Requeue(remaining)``:
the queue keeps only the earliest countdown per key (the later ones publish nothing), so a burst
costs one run at its start (leading edge, so a sudden problem is acted on at once), one when the
window ends (trailing edge), and in between one ``PTTL`` per request. The queue contract's guarantee
holds: every request is followed by a full run that starts after it, at most one window later —

- a request while the window is closed leaves a countdown that fires when it opens;
- a request during a full run marks the key dirty, its re-run finds the window just closed and
  defers the same way;
- a run that raises closes no window, so backoff retries it as before.

The window is a Redis key with a millisecond expiry (``PX``): every worker sees it, Redis' clock
alone measures it (no skew between hosts), it vanishes by itself, and one ``PTTL`` reads what is
left. An emptied Redis only opens every window early, never holds a run back. The queue's per-key
lock means only one process reads or sets a job's window at a time.

Beat's periodic runs take the same path: a periodic run less than a window after an event-triggered
one is deferred to the window's end (never dropped), and a period shorter than the window is
stretched to it.

The ``apiserver`` job is left out: nothing but beat and its own requeues ask for it (no event
routes to it), its requeue is timed to land just after the freeze timeout so a window would delay
the freeze, and a run is two GETs. Where it rides on the overshooting job (equal periods), its
periodic probe shares that job's window, at most one window late; its re-check does not.
"""

from __future__ import annotations

from typing import Final

from mcm_tasks.controllers.safety import ORPHAN_VMS, OVERSHOOTING
from mcm_tasks.redisdb import get_redis, rkey

#: the jobs whose runs coalesce (the ones the informer triggers on events)
COALESCED: Final = frozenset({ORPHAN_VMS, OVERSHOOTING})


# --- decisions --------------------------------------------------------------------------------------------


def hold_off(pttl_ms: int) -> float | None:
    """Seconds until the job may run again, from the window key's PTTL; None when it may run now.

    PTTL answers -2 for a missing key (no window) and -1 for a key without expiry, which this module
    never writes: running is the safe reading of anything unexpected."""
    return pttl_ms / 1000.0 if pttl_ms > 0 else None


def window_after(interval: float, elapsed: float) -> int | None:
    """How many milliseconds the window stays closed after a run that took ``elapsed`` seconds;
    None when none is left (coalescing off, or a run longer than the window)."""
    left = int((interval - elapsed) * 1000)
    return left if left > 0 else None


# --- Redis ------------------------------------------------------------------------------------------------


def window_key(job: str) -> str:
    return rkey("safety", "window", job)


def wait_before_run(job: str) -> float | None:
    """Seconds the job must wait for its window to open; None when it may run now."""
    return hold_off(int(get_redis().pttl(window_key(job))))


def close_window(job: str, interval: float, elapsed: float) -> None:
    """Close the job's window after a full run that started ``elapsed`` seconds ago."""
    left = window_after(interval, elapsed)
    if left is not None:
        get_redis().set(window_key(job), "1", px=left)


def rider_due(mark: str, period: float) -> bool:
    """Whether an ``overshooting`` run should also do a job that rides on it (``mark`` names it): at
    most once per ``period`` (SET NX PX, 0.9 of it so that beat's next run finds it due), so that the
    informer's bursts of overshooting requests during a scale-up do not repeat it at each run."""
    if period <= 0:
        return True
    key = rkey("safety", mark)
    return bool(get_redis().set(key, "1", nx=True, px=max(1, int(period * 900))))


def drain_rules_due(period: float) -> bool:
    """Whether an ``overshooting`` run should also judge the drain rules (once per ``period``)."""
    return rider_due("drain-rules-judged", period)


def apiserver_due(period: float) -> bool:
    """Whether an ``overshooting`` run should also probe the API servers (once per ``period``)."""
    return rider_due("apiserver-checked", period)
