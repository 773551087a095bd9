"""The contract's pure decisions: backoff, countdown caps, outcomes, redaction."""

from __future__ import annotations

import pytest

from mcm_tasks.queue.policy import (
    MAX_MESSAGE,
    Action,
    Outcome,
    Requeue,
    backoff,
    clamp_countdown,
    due_at,
    error_summary,
    outcome_of_error,
    outcome_of_result,
    redact,
)
from mcm_tasks.settings import Settings


@pytest.fixture()
def settings() -> Settings:
    return Settings(
        error_backoff_base=0.005,
        error_backoff_max=1000,
        poison_after=4,
        visibility_timeout=3600,
        long_retry=600,
    )


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(0, 0.0), (1, 0.005), (2, 0.01), (3, 0.02), (11, 5.12), (18, 655.36), (19, 1000.0), (500, 1000.0)],
)
def test_backoff_doubles_from_base_up_to_max(settings: Settings, failures: int, expected: float) -> None:
    assert backoff(failures, settings) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("seconds", "expected"), [(-1, 0.0), (0, 0.0), (15, 15.0), (1800, 1800.0), (5000, 5000.0)]
)
def test_countdowns_are_never_negative_and_not_capped(seconds: float, expected: float) -> None:
    """They wait in Redis, not as ETA messages held by a worker: no visibility-timeout cap."""
    assert clamp_countdown(seconds) == expected


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (None, Outcome(Action.DONE)),
        (Requeue(15), Outcome(Action.REQUEUE, after=15)),
        (Requeue(0), Outcome(Action.REQUEUE, after=0)),
        (Requeue(99999), Outcome(Action.REQUEUE, after=99999)),
        ("something else", Outcome(Action.DONE)),
    ],
)
def test_outcome_of_a_result(settings: Settings, result: object, expected: Outcome) -> None:
    assert outcome_of_result(result, settings) == expected


@pytest.mark.parametrize(
    ("failures_before", "expected"),
    [
        (0, Outcome(Action.RETRY, after=0.005, failures=1)),
        (2, Outcome(Action.RETRY, after=0.02, failures=3)),
        (3, Outcome(Action.RETRY, after=0.04, failures=4)),
        (18, Outcome(Action.RETRY, after=1000.0, failures=19)),
        (10_000, Outcome(Action.RETRY, after=1000.0, failures=10_001)),
    ],
)
def test_errors_back_off_up_to_the_ceiling_and_retry_there_forever(
    settings: Settings, failures_before: int, expected: Outcome
) -> None:
    assert outcome_of_error(failures_before, settings) == expected


@pytest.mark.parametrize(
    ("now", "after", "expected"),
    [
        (1000.3, 0.0, 1000.3),  # at once
        (1000.3, 5.0, 1005.3),  # ShortRetry: exact
        (1000.3, 59.9, 1060.2),  # under GRID_FROM: exact
        (1000.3, 60.0, 1060.0),  # rounded to the nearest grid point
        (1002.4, 600.0, 1600.0),
        (1002.6, 600.0, 1605.0),
        (1001.0, 600.0, 1600.0),
    ],
)
def test_long_requeues_come_due_on_a_shared_grid(now: float, after: float, expected: float) -> None:
    assert due_at(now, after) == pytest.approx(expected)


def test_keys_requeued_within_a_few_seconds_share_a_due_time() -> None:
    """What the grid is for: one keeper read publishes them together."""
    dues = {due_at(1000.0 + i * 0.01, 600.0) for i in range(400)}  # 4 s of rechecks
    assert len(dues) <= 2
    assert all(abs(d - (1000.0 + 600.0)) <= 5.0 for d in dues)


def test_requeue_periods_come_from_settings() -> None:
    from mcm_tasks.settings import configure, reset_settings

    try:
        configure({"short_retry": "7s", "medium_retry": "2m", "long_retry": "9m", "conflict_retry": "100ms"})
        assert (Requeue.short(), Requeue.medium(), Requeue.long(), Requeue.conflict()) == (
            Requeue(7),
            Requeue(120),
            Requeue(540),
            Requeue(0.1),
        )
    finally:
        reset_settings()


@pytest.mark.parametrize(
    ("text", "leaks"),
    [
        ("password=hunter2 while creating", "hunter2"),
        ('{"userData": "I2Nsb3VkLWNvbmZpZwpydW5jbWQ6IFtlY2hvLCBoaV0K"}', "I2Nsb3Vk"),
        ("aws_secret_access_key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY failed", "wJalrXUt"),
        ("token abcdefghijabcdefghijabcdefghij0123456789 expired", "abcdefghijabcdefghij"),
    ],
)
def test_redaction_removes_secret_values(text: str, leaks: str) -> None:
    assert leaks not in redact(text)


def test_redaction_keeps_ordinary_messages_and_truncates() -> None:
    assert redact("machine default/m1: InstanceLimitExceeded") == "machine default/m1: InstanceLimitExceeded"
    assert len(redact("x " * 1000)) == MAX_MESSAGE


def test_error_summary_names_the_class() -> None:
    assert error_summary(ValueError("password=x")) == ("ValueError", "password=<redacted>")


def test_a_held_pass_says_why_before_when_it_comes_back() -> None:
    from mcm_tasks.queue.policy import Requeue, describe, outcome_of_result
    from mcm_tasks.settings import load_settings

    outcome = outcome_of_result(Requeue(60.0, "held: TooManyUnhealthy 7/10"), load_settings())
    assert describe("run", outcome) == "held: TooManyUnhealthy 7/10; requeue in 60s"
    assert describe("run", outcome_of_result(Requeue(60.0), load_settings())) == "requeue in 60s"


def test_a_wake_message_names_the_view_of_its_set() -> None:
    from mcm_tasks.queue.keeper import parse_wake

    assert parse_wake(b"12.5 mcm:ns:shoot-a:q:machine:delayed") == (12.5, "mcm:ns:shoot-a")
    assert parse_wake("3.000000 mcm:q:node:delayed") == (3.0, "mcm")
    assert parse_wake(b"7.25") == (7.25, None)  # an older worker's script: every view is read
    assert parse_wake(b"stop") is None
