"""Coalescing of the event-triggered safety jobs, in-process against a real Redis: the window's
decisions as tables, and the ``safety`` reconciler with its jobs replaced by counting spies."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from mcm_tasks.controllers.safety import APISERVER, ORPHAN_VMS, OVERSHOOTING, debounce_io, register
from mcm_tasks.controllers.safety.register import reconcile_safety
from mcm_tasks.controllers.safety.scope import SafetyScope
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import configure, reset_settings

WINDOW = 10.0


@pytest.mark.parametrize(
    ("pttl_ms", "wait"),
    [(-2, None), (-1, None), (0, None), (1, 0.001), (2500, 2.5), (10_000, 10.0)],
)
def test_hold_off(pttl_ms: int, wait: float | None) -> None:
    assert debounce_io.hold_off(pttl_ms) == wait


@pytest.mark.parametrize(
    ("interval", "elapsed", "left_ms"),
    [(10.0, 0.13, 9870), (10.0, 0.0, 10_000), (10.0, 10.0, None), (10.0, 12.0, None), (0.0, 0.1, None)],
)
def test_window_after(interval: float, elapsed: float, left_ms: int | None) -> None:
    assert debounce_io.window_after(interval, elapsed) == left_ms


def test_only_the_jobs_the_informer_triggers_coalesce() -> None:
    assert {ORPHAN_VMS, OVERSHOOTING} == debounce_io.COALESCED
    assert APISERVER not in debounce_io.COALESCED, "its requeue is timed to freeze on time"


class Spies:
    """Counts the full runs of every job (the reconciler's only way to a scan is ``JOBS``)."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}
        self.failing: set[str] = set()

    def job(self, key: str) -> Callable[[SafetyScope], Requeue | None]:
        def run(scope: SafetyScope) -> Requeue | None:
            self.runs[key] = self.runs.get(key, 0) + 1
            if key in self.failing:
                raise RuntimeError(f"{key} failed")
            return None

        return run


@pytest.fixture()
def spies(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Spies]:
    configure({"redis_url": redis_url, "safety_event_min_interval": f"{WINDOW}s"})
    found = Spies()
    for key in register.JOBS:
        monkeypatch.setitem(register.JOBS, key, found.job(key))
    yield found
    reset_settings()


def test_a_burst_of_requests_costs_one_scan_and_defers_the_rest_to_the_window_end(
    spies: Spies, redis_client: redis.Redis
) -> None:
    results = [reconcile_safety(ORPHAN_VMS) for _ in range(50)]

    assert spies.runs == {ORPHAN_VMS: 1}, "one full scan for the whole burst"
    assert results[0] is None
    deferred = results[1:]
    assert all(isinstance(r, Requeue) and 0 < r.after <= WINDOW for r in deferred), deferred
    # later requests wait for the same end (only the earliest countdown counts, so none runs early)
    afters = [r.after for r in deferred if r is not None]
    assert afters == sorted(afters, reverse=True)

    redis_client.delete(debounce_io.window_key(ORPHAN_VMS))  # the window ends
    assert reconcile_safety(ORPHAN_VMS) is None, "the countdown that fires at the window's end scans"
    assert spies.runs == {ORPHAN_VMS: 2}
    assert isinstance(reconcile_safety(ORPHAN_VMS), Requeue), "and closes the window again"


def test_each_job_has_its_own_window(spies: Spies) -> None:
    assert reconcile_safety(ORPHAN_VMS) is None
    assert reconcile_safety(OVERSHOOTING) is None
    assert isinstance(reconcile_safety(OVERSHOOTING), Requeue)
    assert spies.runs == {ORPHAN_VMS: 1, OVERSHOOTING: 1}


def test_the_window_lives_in_redis_with_an_expiry(spies: Spies, redis_client: redis.Redis) -> None:
    reconcile_safety(OVERSHOOTING)
    left = redis_client.pttl(debounce_io.window_key(OVERSHOOTING))
    assert 0 < left <= WINDOW * 1000, "other workers see it, and it ends by itself"


def test_the_apiserver_check_is_never_held_back(spies: Spies) -> None:
    for _ in range(3):
        assert reconcile_safety(APISERVER) is None
    assert spies.runs == {APISERVER: 3}


def test_a_failed_run_closes_no_window_so_backoff_retries_it(spies: Spies) -> None:
    spies.failing.add(ORPHAN_VMS)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            reconcile_safety(ORPHAN_VMS)
    spies.failing.clear()
    assert reconcile_safety(ORPHAN_VMS) is None
    assert spies.runs == {ORPHAN_VMS: 3}


def test_a_zero_interval_runs_every_request(spies: Spies, redis_url: str) -> None:
    configure({"redis_url": redis_url, "safety_event_min_interval": "0s"})
    for _ in range(5):
        assert reconcile_safety(ORPHAN_VMS) is None
    assert spies.runs == {ORPHAN_VMS: 5}
