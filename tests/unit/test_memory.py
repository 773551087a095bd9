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
def test_a_process_that_worked_trims_once_it_is_quiet_and_not_while_it_works() -> None:
    trimmer = memory.Trimmer(period=0.2).start()
    try:
        time.sleep(0.5)  # at rest from the start: nothing to give back
        assert trimmer.trims == 0
        end = time.monotonic() + 0.6
        while time.monotonic() < end:  # a burst longer than the period: no trim inside it
            trimmer.worked()
            time.sleep(0.05)
        assert trimmer.trims == 0
        wait_until(lambda: trimmer.trims == 1, 5, what="the trim after the burst")
        time.sleep(0.5)
        assert trimmer.trims == 1, "a quiet process does not trim again"
        trimmer.worked()
        wait_until(lambda: trimmer.trims == 2, 5, what="the trim after more work")
    finally:
        trimmer.stop()
