"""A MachineSet's passes spaced by their own cost (``--machine-set-pass-spacing``, issue 33):
mcm_tasks/controllers/machineset/spacing.py decides, spacing_io.py keeps the spacing in a real Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mcm_sandbox.procs import wait_until
from mcm_tasks.controllers.machineset.spacing import held_back, spacing
from mcm_tasks.controllers.machineset.spacing_io import acted, spaced
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import configure, get_settings, reset_settings


@pytest.fixture(autouse=True)
def settings(redis_url: str) -> Iterator[None]:
    configure({"redis_url": redis_url, "machine_set_pass_spacing": 3.0, "machine_updates_batch_period": 0.5})
    yield
    reset_settings()


@pytest.mark.parametrize(
    ("took", "factor", "expected"),
    [
        (0.6, 3.0, 1.8),  # a set of 10 000: the next pass 1.8 s after this one
        (0.05, 3.0, 0.0),  # a set of 1000: the batch period already spaces it further
        (0.2, 3.0, 0.6),
        (1.0, 0.0, 0.0),  # off
        (-1.0, 3.0, 0.0),  # a clock step back is no cost
    ],
)
def test_spacing_follows_the_pass_cost_above_the_batch_period(
    took: float, factor: float, expected: float
) -> None:
    assert spacing(took, factor, 0.5) == pytest.approx(expected)


def test_held_back() -> None:
    assert held_back(None, 10.0) == 0.0
    assert held_back(9.0, 10.0) == 0.0
    assert held_back(11.5, 10.0) == pytest.approx(1.5)


class Pass:
    """A reconciler whose passes burn ``took`` seconds of CPU, counting them."""

    def __init__(self, took: float) -> None:
        self.took = took
        self.runs = 0

    def __call__(self, key: str) -> Requeue | None:
        self.runs += 1
        start = time.thread_time()
        while time.thread_time() - start < self.took:
            pass
        return None


def test_a_pass_waiting_is_not_a_costly_pass() -> None:
    """A pass that waits (on a loaded API server, a busy host) but computes little is not spaced."""
    waiting = Pass(0.0)

    def slow(key: str) -> Requeue | None:
        time.sleep(0.25)
        return waiting(key)

    run = spaced(slow)
    assert [run("ns/waits") for _ in range(2)] == [None, None] and waiting.runs == 2


def test_a_costly_pass_holds_the_next_back_for_k_times_its_cost() -> None:
    inner = Pass(0.25)  # spaced by 0.75 s, above the 0.5 s batch period
    run = spaced(inner)
    assert run("ns/big") is None
    held = run("ns/big")
    assert inner.runs == 1  # handed back without a read
    assert held is not None and 0.4 < held.after < 0.9 and held.note.startswith("spaced")
    assert run("ns/other") is None and inner.runs == 2  # other sets are not held back

    wait_until(lambda: run("ns/big") is None, 5.0, interval=0.05, what="the spaced pass")
    assert inner.runs == 3


def test_cheap_passes_and_spacing_off_are_never_held_back() -> None:
    cheap = Pass(0.0)
    run = spaced(cheap)
    assert [run("ns/small") for _ in range(3)] == [None, None, None] and cheap.runs == 3

    configure({"redis_url": get_settings().redis_url, "machine_set_pass_spacing": 0.0})
    costly = Pass(0.25)
    run = spaced(costly)
    assert [run("ns/big-off") for _ in range(2)] == [None, None] and costly.runs == 2


def test_a_pass_that_created_or_deleted_machines_is_not_spaced() -> None:
    """A scale-down deletes a batch per pass: its passes are not held back, only those that recount."""
    costly = Pass(0.25)

    def deleting(key: str) -> Requeue | None:
        acted()
        return costly(key)

    run = spaced(deleting)
    assert [run("ns/shrinking") for _ in range(2)] == [None, None] and costly.runs == 2
    recounting = spaced(costly)
    assert recounting("ns/shrinking") is None
    held = recounting("ns/shrinking")
    assert held is not None and held.note.startswith("spaced") and costly.runs == 3
