"""Which successful drains record ``DrainSucceeded`` (``went_unremarked``), as a table: only a drain that
started and ended in one pass, unforced, with no pod to move goes without one."""

from __future__ import annotations

import pytest

from mcm_tasks.controllers.machine.drain.force import DrainParams
from mcm_tasks.controllers.machine.drain.outcome import DrainResult, Outcome
from mcm_tasks.controllers.machine.drain.state_io import DrainProgress, PodProgress
from mcm_tasks.controllers.machine.drain.step_io import went_unremarked

PLAIN = DrainParams(timeout=7200, max_evict_retries=360)
FORCED = DrainParams(timeout=7200, max_evict_retries=360, force_reason='label "force-deletion" is set')


def progress(pods: int) -> DrainProgress:
    return DrainProgress(
        machine_uid="u",
        node="n",
        started_at=0.0,
        pods={f"default/p{i}": PodProgress(uid=f"p{i}") for i in range(pods)},
    )


@pytest.mark.parametrize(
    ("forced", "pods", "starting", "unremarked"),
    [
        (False, 0, PLAIN, True),  # an empty node drained in the pass that began it: nothing to tell
        (False, 1, PLAIN, False),  # a pod moved
        (False, 0, None, False),  # began in an earlier pass (it waited, or announced itself)
        (True, 0, FORCED, False),  # a forced drain is always told
    ],
)
def test_only_a_drain_that_did_nothing_goes_without_its_event(
    forced: bool, pods: int, starting: DrainParams | None, unremarked: bool
) -> None:
    result = DrainResult(Outcome.SUCCEEDED, forced)
    assert went_unremarked(result, progress(pods), starting) is unremarked
