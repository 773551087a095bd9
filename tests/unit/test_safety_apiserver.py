"""The API-server freeze matrix (``mcm_tasks.controllers.safety.apiserver.decide``): control and target
up or down × the timer × already frozen."""

from __future__ import annotations

import pytest

from mcm_tasks.controllers.safety.apiserver import RECHECK_MARGIN, FreezeAction, FreezeDecision, decide

NOW = 1000.0
TIMEOUT = 30.0
A = FreezeAction


@pytest.mark.parametrize(
    ("control_up", "target_up", "frozen", "down_since", "expected"),
    [
        # not frozen, both up
        pytest.param(True, True, False, None, FreezeDecision(A.NONE), id="up-idle"),
        pytest.param(True, True, False, NOW - 10, FreezeDecision(A.CLEAR_TIMER), id="up-clears-timer"),
        pytest.param(True, True, False, NOW - 100, FreezeDecision(A.CLEAR_TIMER), id="up-clears-old-timer"),
        # not frozen, one or both down, no timer yet
        pytest.param(False, True, False, None, FreezeDecision(A.START_TIMER, TIMEOUT + RECHECK_MARGIN),
                     id="control-down-starts-timer"),
        pytest.param(True, False, False, None, FreezeDecision(A.START_TIMER, TIMEOUT + RECHECK_MARGIN),
                     id="target-down-starts-timer"),
        pytest.param(False, False, False, None, FreezeDecision(A.START_TIMER, TIMEOUT + RECHECK_MARGIN),
                     id="both-down-start-timer"),
        # not frozen, down, timer running
        pytest.param(False, True, False, NOW - 10, FreezeDecision(A.WAIT, 20 + RECHECK_MARGIN),
                     id="control-down-within-timeout"),
        pytest.param(True, False, False, NOW - TIMEOUT, FreezeDecision(A.WAIT, RECHECK_MARGIN),
                     id="target-down-at-timeout"),
        pytest.param(False, True, False, NOW - TIMEOUT - 1, FreezeDecision(A.FREEZE),
                     id="control-down-freezes"),
        pytest.param(True, False, False, NOW - TIMEOUT - 1, FreezeDecision(A.FREEZE),
                     id="target-down-freezes"),
        pytest.param(False, False, False, NOW - 500, FreezeDecision(A.FREEZE), id="both-down-freeze"),
        # frozen
        pytest.param(False, True, True, NOW - 500, FreezeDecision(A.STAY_FROZEN), id="frozen-control-down"),
        pytest.param(True, False, True, NOW - 500, FreezeDecision(A.STAY_FROZEN), id="frozen-target-down"),
        pytest.param(False, False, True, None, FreezeDecision(A.STAY_FROZEN), id="frozen-down-no-timer"),
        pytest.param(True, True, True, NOW - 500, FreezeDecision(A.UNFREEZE), id="frozen-up-unfreezes"),
        pytest.param(True, True, True, None, FreezeDecision(A.UNFREEZE), id="frozen-up-no-timer-unfreezes"),
    ],
)  # fmt: skip
def test_freeze_matrix(
    control_up: bool, target_up: bool, frozen: bool, down_since: float | None, expected: FreezeDecision
) -> None:
    assert decide(control_up, target_up, frozen, down_since, NOW, TIMEOUT) == expected


def test_zero_timeout_freezes_on_the_second_failed_check() -> None:
    first = decide(False, True, False, None, NOW, 0.0)
    assert first.action is A.START_TIMER
    assert decide(False, True, False, NOW, NOW + 0.01, 0.0).action is A.FREEZE
