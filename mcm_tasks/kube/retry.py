"""Retries of a call that failed for a reason that may pass: client-go's ``retry.OnError`` and
``retry.RetryOnConflict`` (``k8s.io/client-go/util/retry``) over a ``wait.Backoff``
(``k8s.io/apimachinery/pkg/util/wait``), with its ``DefaultRetry`` and ``DefaultBackoff``.

Apart from ``ops`` because nothing here talks to the API: a retry only calls a function again, so the
read-modify-write functions of the controllers (``ops.retry_on_conflict`` re-exports these, the name
they use) and any other retriable call share one backoff.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from mcm_tasks.kube.errors import is_conflict

__all__ = ["DEFAULT_BACKOFF", "DEFAULT_RETRY", "Backoff", "retry_on_conflict", "retry_on_error"]

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """wait.Backoff: first delay ``duration``, multiplied by ``factor`` each time, up to ``cap``,
    each stretched by a random fraction up to ``jitter``."""

    duration: float = 0.01
    factor: float = 1.0
    jitter: float = 0.1
    cap: float | None = None

    def delays(self, rand: Callable[[], float] = random.random) -> Callable[[], float]:
        current = [self.duration]

        def step() -> float:
            base = current[0]
            if self.cap is not None:
                base = min(base, self.cap)
            current[0] = base * self.factor
            return base * (1 + self.jitter * rand()) if self.jitter > 0 else base

        return step


#: client-go's retry.DefaultRetry: 5 attempts 10 ms apart (with 10 % jitter)
DEFAULT_RETRY = Backoff(duration=0.01, factor=1.0, jitter=0.1)
#: client-go's retry.DefaultBackoff: 10 ms growing fivefold
DEFAULT_BACKOFF = Backoff(duration=0.01, factor=5.0, jitter=0.1)


def retry_on_error(
    fn: Callable[[], T],
    retriable: Callable[[BaseException], bool],
    *,
    attempts: int = 5,
    backoff: Backoff | float = DEFAULT_RETRY,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn`` until it returns, at most ``attempts`` times, sleeping between retriable
    failures; the last error propagates. A non-retriable error propagates at once."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    policy = backoff if isinstance(backoff, Backoff) else Backoff(duration=backoff, jitter=0.0)
    next_delay = policy.delays()
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as err:
            if attempt == attempts or not retriable(err):
                raise
        sleep(next_delay())
    raise AssertionError("unreachable")


def retry_on_conflict(
    fn: Callable[[], T],
    attempts: int = 5,
    backoff: Backoff | float = DEFAULT_RETRY,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Re-run a read-modify-write ``fn`` while it fails with a Conflict.

    ``fn`` must read the object afresh each time and apply its change to what it read; retrying a
    write of a stale copy would only conflict again.
    """
    return retry_on_error(fn, is_conflict, attempts=attempts, backoff=backoff, sleep=sleep)
