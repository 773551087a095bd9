"""Saying why the informer could not fully use an object: a log line, a metric, a Warning Event.

The writer thread must not wait on the API server (Events go through the shared rate limit), so
problems are handed to one background thread through a bounded queue; when it is full (a flood of
hostile objects) the log line and the metric still happen and only the Event is dropped. The Event
carries the object's identity and the problem; never the object's content.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import Counter

from informers.events import Problem
from mcm_tasks.tenancy import carried

log = logging.getLogger(__name__)

QUEUE_MAX = 1000

OBJECT_PROBLEMS = Counter(
    "mcm_informer_object_problems",
    "Objects the informer mirrored but could not fully index or route, by kind and reason.",
    ["kind", "reason"],
)

#: records one Warning Event: (object identity, reason, message)
Record = Callable[[dict[str, Any], str, str], Any]


class ProblemReporter:
    def __init__(self, record: Record | None) -> None:
        self.record = record
        self._queue: queue.Queue[Problem | None] = queue.Queue(QUEUE_MAX)
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def report(self, problems: Iterable[Problem]) -> None:
        for problem in problems:
            OBJECT_PROBLEMS.labels(problem.kind, problem.reason).inc()
            log.warning("%s %s: %s: %s", problem.kind, problem.key, problem.reason, problem.message)
            if self.record is None:
                continue
            self._start()
            try:
                self._queue.put_nowait(problem)
            except queue.Full:
                self.dropped += 1

    def close(self, timeout: float = 5.0) -> None:
        if self._thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)
        self._thread = None

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=carried(self._run), name="informer-problems", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            problem = self._queue.get()
            if problem is None:
                return
            try:
                assert self.record is not None
                self.record(problem.identity, problem.reason, problem.message)
            except Exception:  # Events are best effort; the log line above already said it
                log.debug("event for %s %s not recorded", problem.kind, problem.key, exc_info=True)
