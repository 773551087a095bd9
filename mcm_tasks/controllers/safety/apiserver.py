"""The API-server freeze (upstream ``reconcileClusterMachineSafetyAPIServer``), as a pure decision.

Each check probes the control and the target API server. While the machine controller is not frozen,
the first failed check starts a timer, a passing check clears it, and a failed check with the timer
older than the status-check timeout freezes the controller. While frozen, a passing check unfreezes
it: machines whose health went Unknown because nobody could see their nodes get their timeout back
(Unknown → Running) and every machine is reconciled again shortly after, once kubelets had time to
report.

A probe is a GET of an object that should not exist: NotFound (or, should someone create it, the
object) proves the server answers and serves the resource; any other error (an error status, a
timeout, a refused connection) counts as down.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

#: the name probed on both servers (MCM's)
PROBE_NAME = "dummy_name"
#: Unknown machines get this description when their health timeout is reset (MCM's text)
RESET_DESCRIPTION = "Machine Health Timeout was reset due to APIServer being unreachable"
#: a re-check lands this much after the timeout ends, so it sees the timeout as exceeded
RECHECK_MARGIN = 0.25


class FreezeAction(StrEnum):
    NONE = "none"  # nothing changes
    START_TIMER = "start-timer"  # first failed check: remember when
    WAIT = "wait"  # down, timer running, not long enough yet
    FREEZE = "freeze"  # down for longer than the timeout
    STAY_FROZEN = "stay-frozen"  # still down
    CLEAR_TIMER = "clear-timer"  # up again before the timeout
    UNFREEZE = "unfreeze"  # up again after a freeze


@dataclass(frozen=True)
class FreezeDecision:
    action: FreezeAction
    #: seconds until the check should run again to freeze on time (WAIT / START_TIMER), else None
    recheck_after: float | None = None


def decide(
    control_up: bool, target_up: bool, frozen: bool, down_since: float | None, now: float, timeout: float
) -> FreezeDecision:
    up = control_up and target_up
    if frozen:
        return FreezeDecision(FreezeAction.UNFREEZE if up else FreezeAction.STAY_FROZEN)
    if up:
        return FreezeDecision(FreezeAction.CLEAR_TIMER if down_since is not None else FreezeAction.NONE)
    if down_since is None:
        return FreezeDecision(FreezeAction.START_TIMER, recheck_after=timeout + RECHECK_MARGIN)
    elapsed = now - down_since
    if elapsed > timeout:
        return FreezeDecision(FreezeAction.FREEZE)
    return FreezeDecision(FreezeAction.WAIT, recheck_after=timeout - elapsed + RECHECK_MARGIN)
