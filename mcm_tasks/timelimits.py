"""The reconcile time limits on the pools where Celery enforces none (``threads``, ``solo``).

The queue contract needs every run to end before its key's lock (``reconcile_lock_ttl``) expires:
Celery's prefork pool enforces ``task_soft_time_limit`` (raises ``SoftTimeLimitExceeded`` in the
pool process) and ``task_time_limit`` (kills the pool process; the message comes back, as
``task_acks_on_timeout`` is off). ``celery.concurrency.thread`` and ``solo`` ignore both, so on those
pools a watchdog thread of the worker does the same:

- **soft limit**: ``SoftTimeLimitExceeded`` is raised in the thread that runs the task
  (``PyThreadState_SetAsyncExc``), at its next Python instruction: the reconciler fails like any
  failure (backoff, failing entry, Warning Event), as on prefork;
- **hard limit**: a thread cannot be stopped from outside (one blocked in a system call sees the
  soft limit only when the call returns), and a run that outlived its lock could overlap the next
  run of its key. So the worker ends itself with SIGKILL, as Celery kills a prefork pool process:
  its messages come back through any worker's sweep after ``worker_lost_timeout``, and the same
  message id takes its key's lock over (``WorkerLost``, counted towards ``poison_after``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass

from billiard.exceptions import SoftTimeLimitExceeded

log = logging.getLogger(__name__)

#: pools on which Celery enforces the time limits itself
ENFORCED_BY_CELERY = ("prefork", "processes")


@dataclass(slots=True)
class Run:
    task: str
    task_id: str
    soft_at: float
    hard_at: float
    soft_sent: bool = False


def raise_in_thread(ident: int, exc: type[BaseException]) -> bool:
    """Raise ``exc`` in the thread ``ident`` at its next Python instruction; whether it was found."""
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc)) == 1


def _take_pending() -> None:
    """A Python call: entering it delivers an exception pending for this thread."""


def _kill_self() -> None:
    logging.shutdown()  # flush the reason first: SIGKILL leaves no chance
    os.kill(os.getpid(), signal.SIGKILL)


class Watchdog(threading.Thread):
    """Tracks the runs of this process (``started``/``finished`` from the task signals, in the
    thread that runs the task) and applies the limits once a second."""

    def __init__(self, soft: float | None, hard: float | None, period: float = 1.0, kill=_kill_self) -> None:  # type: ignore[no-untyped-def]
        super().__init__(name="mcm-time-limits", daemon=True)
        self.soft, self.hard, self.period, self._kill = soft, hard, period, kill
        self._runs: dict[int, Run] = {}
        self._lock = threading.Lock()
        self._stop_event = threading.Event()

    def started(self, task: str, task_id: str) -> None:
        now = time.monotonic()
        soft = now + self.soft if self.soft else float("inf")
        hard = now + self.hard if self.hard else float("inf")
        with self._lock:
            self._runs[threading.get_ident()] = Run(task, task_id, soft, hard)

    def finished(self) -> None:
        """The run of this thread ended. A soft limit raised just before (under the lock, while the
        run was listed) is taken here, never later, where it would end the pool's thread."""
        ident = threading.get_ident()
        for _ in range(3):
            try:
                with self._lock:
                    self._runs.pop(ident, None)
                _take_pending()
                return
            except SoftTimeLimitExceeded:
                continue  # came after the run ended: nothing is left to stop

    def check(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:  # a run is raised into only while listed (see ``finished``)
            for ident, run in self._runs.items():
                if now >= run.hard_at:
                    log.critical(
                        "%s[%s] passed the hard time limit (%gs): ending the worker, so its messages "
                        "are redelivered", run.task, run.task_id, self.hard,
                    )  # fmt: skip
                    self._kill()
                    return
                if now >= run.soft_at and not run.soft_sent:
                    run.soft_sent = True
                    log.error("%s[%s] passed the soft time limit (%gs)", run.task, run.task_id, self.soft)
                    raise_in_thread(ident, SoftTimeLimitExceeded)

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        while not self._stop_event.wait(self.period):
            try:
                self.check()
            except Exception:  # never die: the limits depend on this thread
                log.exception("time limits: unexpected error")
