"""Pure decisions of the queue contract: what a reconcile's result or error means for its key.

Kept free of I/O so the table tests pin the rules (backoff doubling to its ceiling, countdowns,
redaction) without Redis or Celery.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from mcm_tasks.settings import Settings, get_settings

#: longest error message kept in a failing entry; enough to diagnose, too short to hold a dump
MAX_MESSAGE = 300


@dataclass(frozen=True, slots=True)
class Requeue:
    """A reconciler's "come back in ``after`` seconds" (MCM's ShortRetry / MediumRetry / LongRetry).

    ``note`` says why in a few words when the pass was held back rather than done (``held:
    TooManyUnhealthy 7/10``); it leads the outcome Flower and ``admin inspect`` show."""

    after: float
    note: str = ""

    @classmethod
    def short(cls) -> Requeue:
        return cls(get_settings().short_retry)

    @classmethod
    def medium(cls) -> Requeue:
        return cls(get_settings().medium_retry)

    @classmethod
    def long(cls) -> Requeue:
        return cls(get_settings().long_retry)

    @classmethod
    def conflict(cls) -> Requeue:
        return cls(get_settings().conflict_retry)


class Action(StrEnum):
    DONE = "done"  # forget the key's backoff
    REQUEUE = "requeue"  # success, but come back later
    RETRY = "retry"  # failure: back off (up to the ceiling, forever) and try again


@dataclass(frozen=True, slots=True)
class Outcome:
    action: Action
    #: seconds until the key comes back (REQUEUE, RETRY); 0 means at once
    after: float = 0.0
    #: consecutive failures including this one (RETRY)
    failures: int = 0
    #: the reconciler's word on why it comes back (Requeue.note)
    note: str = ""


def clamp_countdown(seconds: float) -> float:
    """A countdown is never negative. Countdowns live in Redis (the delayed sets), so unlike a Celery
    ETA message held by a worker they need no upper bound."""
    return max(0.0, float(seconds))


#: a requeue at least this long (MCM's LongRetry and health rechecks, long backoffs) comes due on
#: the shared grid of DUE_GRID seconds
GRID_FROM = 60.0
DUE_GRID = 5.0


def due_at(now: float, after: float) -> float:
    """When a run's requeue or backoff of ``after`` seconds comes due. A long one is rounded to the
    nearest multiple of DUE_GRID (at most DUE_GRID / 2 off, under 5 % of the shortest rounded
    wait; on average exact), so keys requeued within the same few seconds come due together:
    every worker's keeper wakes and reads the delayed sets once per grid point, not once per key
    (1000 Running machines rechecked every LongRetry cost each keeper 1000 wake-ups, a read and,
    for the one that wins the race, a publish each; on the grid at most LongRetry / DUE_GRID).
    Short waits (ShortRetry, backoffs, conflicts) stay exact."""
    due = now + after
    if after < GRID_FROM:
        return due
    return round(due / DUE_GRID) * DUE_GRID


def backoff(failures: int, settings: Settings) -> float:
    """client-go's per-item exponential backoff: base · 2^(failures-1), capped."""
    if failures <= 0:
        return 0.0
    exponent = min(failures - 1, 64)
    return float(min(settings.error_backoff_base * (2.0**exponent), settings.error_backoff_max))


def outcome_of_result(result: object, settings: Settings) -> Outcome:
    """A reconciler returned: ``None`` is done, ``Requeue`` comes back; anything else counts as done."""
    if isinstance(result, Requeue):
        return Outcome(Action.REQUEUE, after=clamp_countdown(result.after), note=result.note)
    return Outcome(Action.DONE)


def outcome_of_error(failures_before: int, settings: Settings) -> Outcome:
    """A reconcile raised: retry after the backoff, which stops growing at ``error_backoff_max`` but
    never stops (client-go's rate-limited requeue; nothing parks a key for a transient fault)."""
    failures = failures_before + 1
    return Outcome(Action.RETRY, after=backoff(failures, settings), failures=failures)


_SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b([\w-]*(?:secret|password|passwd|token|credential|userdata|user_data|private[_-]?key|"
    r"access[_-]?key|api[_-]?key)[\w-]*)(\s*[=:]\s*|\"\s*:\s*\"?|'\s*:\s*'?)(\S+)"
)
#: long base64/hex-looking runs: cloud-init payloads, keys, tokens
_LONG_TOKEN = re.compile(r"[A-Za-z0-9+/=_\-]{32,}")


def redact(text: str) -> str:
    """An error message fit for the failing list and Events (shown in the admin CLI): no values of
    secret-looking fields and no long opaque tokens, truncated. Reconcilers should not put secrets
    into errors in the first place; this is the safety net."""
    text = _SECRET_ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}<redacted>", text)
    text = _LONG_TOKEN.sub("<redacted>", text)
    if len(text) > MAX_MESSAGE:
        text = text[: MAX_MESSAGE - 1] + "…"
    return text


#: why a delivery did not run its reconciler (BEGIN's status), as Flower and the history show it
SKIPPED: dict[str, str] = {
    "busy": "skipped: key running elsewhere",
    "duplicate": "skipped: duplicate message",
    "quarantined": "quarantined: its worker died repeatedly, retried at long-retry",
    "invalid": "skipped: invalid task arguments",
}


class ReconcileFailed(Exception):
    """A reconcile that failed, as its Celery task reports it (Flower's FAILURE with the error's
    class and redacted message). Raised by the task shell only after the contract has recorded the
    failure, so acknowledging the message (``task_acks_on_failure``) loses nothing."""

    @classmethod
    def of(cls, error: str, message: str) -> ReconcileFailed:
        # one argument, so the exception pickles as Celery requires and reads "Class: message"
        return cls(f"{error}: {message}" if message else error)


def seconds_text(seconds: float) -> str:
    """``15s``, ``1.5s``, ``0.005s``: short and exact enough to recognise the retry period."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"


def describe(status: str, outcome: Outcome | None) -> str:
    """One delivery's result in words: ``done``, ``requeue in 15s``, ``retry in 0.04s (failure 3)``,
    ``skipped: key running elsewhere``."""
    if outcome is None:
        return SKIPPED.get(status, status)
    if outcome.action is Action.DONE:
        return "done"
    if outcome.action is Action.REQUEUE:
        text = f"requeue in {seconds_text(outcome.after)}" if outcome.after > 0 else "requeue now"
        return f"{outcome.note}; {text}" if outcome.note else text
    return f"retry in {seconds_text(outcome.after)} (failure {outcome.failures})"


def error_summary(exc: BaseException) -> tuple[str, str]:
    """(error class, redacted message) for logs, the failing list and Events."""
    return type(exc).__name__, redact(str(exc))
