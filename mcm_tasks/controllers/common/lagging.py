"""When the mirror lags (issue 29): the decision, a pure function of the informer's lag hash.

A rollout step is a chain of our own controllers, each reacting to the previous one's write: a
machine turns Running, its MachineSet counts it, the MachineDeployment scales its sets, the sets
create and delete machines, the machine controller acts on them. Through the informer each link
costs one watch round trip; with watches 3 s late (a loaded API server) a rolling update of 20 took
25 times as long as without lag. While the mirror lags, the link is made by the writer instead: a
pass that writes an object another controller must act on enqueues that controller's key itself
(``lagging_io.wake``), and the passes of the chain read what they act on from the API server rather
than a mirror that has not seen the write yet (``lagging_io.mirror_lagging``); a Pending machine
polls its Node, whose join is the one event from outside. The informer still routes every event as
before (the woken passes then find nothing left to do), so nothing depends on the writer's process
surviving its write.

While the mirror keeps up, none of this happens: no extra task, no live read.

Not in MCM: upstream's controllers react to their informers only (a lagging watch delays each
step), see docs/differences.md.
"""

from __future__ import annotations

from collections.abc import Mapping

from mcm_tasks import kinds

#: the mirrored kinds whose lag delays a rollout's chain of passes (the Node: a new machine's join)
CHAIN_KINDS = (
    kinds.MACHINE.mirror,
    kinds.MACHINE_SET.mirror,
    kinds.MACHINE_DEPLOYMENT.mirror,
    kinds.NODE.mirror,
)
#: a lag the informer reported longer ago than this is not believed any more (the hash is written
#: only when events arrive, so a mirror that caught up and then went quiet would keep its last lag)
SIGNAL_WINDOW = 30.0


def is_lagging(lag_hash: Mapping[str, str], now: float, threshold: float) -> bool:
    """Whether the mirror lags: one of ``CHAIN_KINDS`` reached it at least ``threshold`` seconds after
    the API server wrote it (``mcm_informer_lag_seconds``), reported within ``SIGNAL_WINDOW``.
    ``threshold`` 0 turns the lag mode off. The informer's lag has 1 s resolution (it reads up to
    1 s high), so a threshold under 2 s would call a mirror that keeps up lagging."""
    if threshold <= 0:
        return False
    for kind in CHAIN_KINDS:
        try:
            seconds, at = float(lag_hash.get(kind, "")), float(lag_hash.get(f"{kind}:at", ""))
        except ValueError:
            continue
        if seconds >= threshold and now - at <= SIGNAL_WINDOW:
            return True
    return False
