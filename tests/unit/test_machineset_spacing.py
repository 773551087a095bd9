"""A MachineSet's passes spaced by their own cost (``--machine-set-pass-spacing``, issue 33), and its
recounts by ``--machine-set-recount-interval``: mcm_tasks/controllers/machineset/spacing.py
decides, spacing_io.py keeps the spacing and the floor in a real Redis, and the queue contract's
SCHEDULE_BATCHED holds the batched wakes to the floor."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mcm_sandbox.procs import wait_until
from mcm_tasks.controllers.machineset.spacing import held_back, spacing
from mcm_tasks.controllers.machineset.spacing_io import acted, spaced
from mcm_tasks.kinds import Queue
from mcm_tasks.queue import Requeue
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.queue.producer import enqueue_many_after, enqueue_together
from mcm_tasks.redisdb import get_redis
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


# --- the recount floor (``--machine-set-recount-interval``) -------------------------------------------


def _floor(key: str) -> float | None:
    raw = get_redis().get(queue_keys(Queue.MACHINE_SET).floor + key)
    return float(raw) if raw is not None else None


def _due(key: str) -> float | None:
    score = get_redis().zscore(queue_keys(Queue.MACHINE_SET).delayed, key)
    return float(score) if score is not None else None


def test_a_recount_raises_the_floor_and_a_pass_that_acted_lifts_it() -> None:
    configure({"redis_url": get_settings().redis_url, "machine_set_recount_interval": 2.0})
    before = time.time()
    assert spaced(Pass(0.0))("ns/counted") is None
    floor = _floor("ns/counted")
    assert floor is not None and before + 1.9 < floor < time.time() + 2.1
    assert 0 < get_redis().pttl(queue_keys(Queue.MACHINE_SET).floor + "ns/counted") <= 2000  # expires

    def creating(key: str) -> Requeue | None:
        acted()
        return None

    assert spaced(creating)("ns/counted") is None
    assert _floor("ns/counted") is None


def test_batched_wakes_wait_for_the_floor_and_others_do_not() -> None:
    """A machine's change wakes its set no sooner than the set's floor; the set's own change (at
    once), and an explicit requeue-after, are not held by it."""
    configure({"redis_url": get_settings().redis_url, "machine_set_recount_interval": 3.0})
    assert spaced(Pass(0.0))("ns/floored") is None  # a recount: floor in 3 s
    floor = _floor("ns/floored")
    assert floor is not None

    enqueue_together((), [(Queue.MACHINE_SET, "ns/floored")], 0.5, floored=True)
    assert _due("ns/floored") == pytest.approx(floor, abs=0.01)
    # a second wake in the same burst joins it
    enqueue_together((), [(Queue.MACHINE_SET, "ns/floored")], 0.5, floored=True)
    assert _due("ns/floored") == pytest.approx(floor, abs=0.01)

    # an explicit requeue-after keeps client-go's AddAfter: the earliest due time wins
    enqueue_many_after([(Queue.MACHINE_SET, "ns/floored")], 0.5)
    due = _due("ns/floored")
    assert due is not None and due < floor - 2.0

    # no floor (another set, or the floor expired): the batch period alone
    now = time.time()
    enqueue_together((), [(Queue.MACHINE_SET, "ns/free")], 0.5, floored=True)
    due = _due("ns/free")
    assert due is not None and now + 0.4 < due < now + 0.7

    # the set's own change is published at once, floor or not
    assert enqueue_together([(Queue.MACHINE_SET, "ns/floored")], (), 0.5, floored=True) == 1
    assert get_redis().hget(queue_keys(Queue.MACHINE_SET).pending, "ns/floored") is not None


def test_the_floor_off_writes_nothing() -> None:
    configure({"redis_url": get_settings().redis_url, "machine_set_recount_interval": 0.0})
    assert spaced(Pass(0.0))("ns/unfloored") is None
    assert _floor("ns/unfloored") is None
