"""The reconcile time limits on pools where Celery enforces none (threads, solo): the soft limit
raises in the thread that runs the task, the hard limit ends the worker, and a run that ended is
never raised into (it would end the pool's thread instead)."""

from __future__ import annotations

import sys
import threading
import time

from billiard.exceptions import SoftTimeLimitExceeded

from mcm_sandbox.procs import wait_until
from mcm_tasks.timelimits import Watchdog, raise_in_thread


def _run_in_thread(dog: Watchdog, seconds: float) -> tuple[threading.Thread, list[str]]:
    """A task that runs Python code for ``seconds`` (or until interrupted); what ended it."""
    ended: list[str] = []
    started = threading.Event()

    def task() -> None:
        dog.started("mcm.reconcile.machine", "id-1")
        started.set()
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                time.sleep(0.001)
            ended.append("finished")
        except SoftTimeLimitExceeded:
            ended.append("soft limit")
        finally:
            dog.finished()

    thread = threading.Thread(target=task, daemon=True)
    thread.start()
    started.wait(5)
    return thread, ended


def test_the_soft_limit_raises_in_the_task_s_thread_once() -> None:
    kills: list[int] = []
    dog = Watchdog(soft=0.05, hard=60, kill=lambda: kills.append(1))
    thread, ended = _run_in_thread(dog, seconds=10)
    wait_until(lambda: dog.check() or bool(ended), timeout=5, interval=0.02, what="the soft limit")
    thread.join(5)
    assert ended == ["soft limit"] and not kills
    dog.check()
    assert ended == ["soft limit"], "raised once"


def test_the_hard_limit_ends_the_worker() -> None:
    kills: list[int] = []
    dog = Watchdog(soft=None, hard=0.05, kill=lambda: kills.append(1))
    thread, ended = _run_in_thread(dog, seconds=0.5)
    wait_until(lambda: dog.check() or bool(kills), timeout=5, interval=0.02, what="the hard limit")
    thread.join(5)
    assert kills and ended == ["finished"], "no soft limit set: the run itself is not interrupted"


def test_a_run_that_ended_in_time_is_left_alone() -> None:
    kills: list[int] = []
    dog = Watchdog(soft=0.2, hard=0.3, kill=lambda: kills.append(1))
    thread, ended = _run_in_thread(dog, seconds=0.01)
    thread.join(5)
    dog.check(time.monotonic() + 10)
    assert ended == ["finished"] and not kills


def test_a_soft_limit_that_lands_as_the_run_ends_is_taken_by_finished() -> None:
    """Raised while the run is still listed (the watchdog holds the lock), delivered once the
    thread is inside ``finished``: taken there, so it cannot surface later in the pool's loop."""
    dog = Watchdog(soft=60, hard=120)
    outcome: list[str] = []
    go = threading.Event()

    def task() -> None:
        dog.started("mcm.reconcile.machine", "id-2")
        go.wait(5)
        try:
            dog.finished()  # blocks on the watchdog's lock, below
            total = sum(range(1000))  # Python code after it: a pending exception would land here
            outcome.append(f"clean {total}")
        except SoftTimeLimitExceeded:
            outcome.append("escaped")

    thread = threading.Thread(target=task, daemon=True)
    thread.start()
    ident = thread.ident
    assert ident is not None
    wait_until(lambda: ident in dog._runs, timeout=5, interval=0.01, what="the run to start")
    with dog._lock:  # the watchdog in the middle of ``check``
        go.set()

        def waits_in_finished() -> bool:
            frame = sys._current_frames().get(ident)
            return frame is not None and frame.f_code.co_name == "finished"

        wait_until(waits_in_finished, timeout=5, interval=0.01, what="the run to end")
        assert dog._runs[ident].task == "mcm.reconcile.machine", "still listed"
        raise_in_thread(ident, SoftTimeLimitExceeded)
    thread.join(5)
    assert outcome == ["clean 499500"] and not dog._runs
