"""mcm_tasks/memory.py: the glibc calls that keep a process's resident memory near its use."""

from __future__ import annotations

import time

import pytest

from mcm_sandbox.procs import wait_until
from mcm_tasks import memory

glibc = pytest.mark.skipif(memory._LIBC is None, reason="not glibc")


@glibc
def test_the_arena_cap_and_the_trim_reach_glibc() -> None:
    assert memory.limit_arenas() is True
    memory.trim()  # returns whether pages were freed: either answer is fine, it must not raise


@glibc
def test_a_working_process_trims_once_per_period_and_once_after_its_work_then_sleeps() -> None:
    trimmer = memory.Trimmer(period=0.3).start()
    try:
        time.sleep(0.5)
        assert trimmer.trims == 0, "no work, no trim"
        end = time.monotonic() + 1.0
        while time.monotonic() < end:  # work through about three periods
            trimmer.worked()
            time.sleep(0.02)
        assert 2 <= trimmer.trims <= 4, f"one trim per period while working, not {trimmer.trims}"
        wait_until(lambda: trimmer.trims >= 3, 5, what="the trim after the work")
        settled = trimmer.trims
        time.sleep(1.0)
        assert trimmer.trims <= settled + 1, "at rest it stops trimming"
        after = trimmer.trims
        time.sleep(0.7)
        assert trimmer.trims == after, "at rest it stops trimming"
    finally:
        trimmer.stop()
