"""Coalescing of event-triggered safety runs through the real queue contract: a real Celery worker on
the ``safety`` queue runs the real ``safety`` reconciler, whose jobs are replaced by spies that log
each full run to Redis (``install_spy``, loaded through ``MCM_RECONCILER_MODULES``).

Requests arrive one after another, each only once the previous one was handled, as the informer's
Machine DELETE events do during a scale-down: without the window every request would scan.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from mcm_sandbox.procs import ManagedProcess, wait_until
from mcm_tasks.controllers.safety import ORPHAN_VMS, debounce_io
from mcm_tasks.controllers.safety.scope import SafetyScope
from mcm_tasks.queue import Requeue, enqueue
from mcm_tasks.redisdb import get_redis, rkey
from mcm_tasks.settings import configure, reset_settings

pytestmark = pytest.mark.integration

WINDOW = 4.0
REQUESTS = 15


def scans_key(job: str) -> str:
    return rkey("test", "safety-scans", job)


def handled_key() -> str:
    return rkey("test", "safety-handled")


def install_spy() -> None:
    """In the worker: every job logs the time of its full run; every request handled is counted."""
    from mcm_tasks.controllers.safety import register
    from mcm_tasks.queue import register_reconciler

    def spy(job: str) -> Callable[[SafetyScope], Requeue | None]:
        def run(scope: SafetyScope) -> Requeue | None:
            get_redis().rpush(scans_key(job), repr(time.time()))
            return None

        return run

    for job in register.JOBS:
        register.JOBS[job] = spy(job)

    def counted(key: str) -> Requeue | None:
        try:
            return register.reconcile_safety(key)
        finally:
            get_redis().incr(handled_key())

    register_reconciler("safety", counted)


@pytest.fixture()
def worker(redis_url: str, tmp_path: Path) -> Iterator[redis.Redis]:
    configure({"redis_url": redis_url, "safety_event_min_interval": f"{WINDOW}s"})
    env = {
        **os.environ,
        "MCM_REDIS_URL": redis_url,
        "MCM_SAFETY_EVENT_MIN_INTERVAL": f"{WINDOW}s",
        "MCM_RECONCILER_MODULES": f"{__name__}:install_spy",
    }
    proc = ManagedProcess(
        [sys.executable, "-m", "mcm_tasks.worker_cli", "worker", "--queues", "safety",
         "--concurrency", "1", "--loglevel", "warning", "--hostname", "safety-debounce@%h"],
        tmp_path / "worker.log",
        env=env,
    )  # fmt: skip
    proc.start()
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        proc.stop()
        client.close()
        reset_settings()


def scans(client: redis.Redis) -> list[float]:
    return [float(t) for t in client.lrange(scans_key(ORPHAN_VMS), 0, -1)]  # type: ignore[union-attr]


def handled(client: redis.Redis) -> int:
    return int(client.get(handled_key()) or 0)  # type: ignore[arg-type]


def request_and_wait(client: redis.Redis) -> float:
    """One request for ``orphan-vms``, returned once the worker has handled it; when it was made."""
    before = handled(client)
    at = time.time()
    enqueue("safety", ORPHAN_VMS)
    wait_until(lambda: handled(client) > before, 30, what="the worker to handle the request")
    return at


def test_requests_one_after_another_cost_one_scan_per_window_and_each_is_followed_by_one(
    worker: redis.Redis,
) -> None:
    first = request_and_wait(worker)
    assert len(scans(worker)) == 1, "the first request of a quiet period scans at once"
    window_ends = scans(worker)[0] + WINDOW

    last = first
    for _ in range(REQUESTS - 1):
        if time.time() >= window_ends - 0.5:
            break  # a slow machine: stay inside the window
        last = request_and_wait(worker)
    assert len(scans(worker)) == 1, f"requests inside the window wait for its end: {scans(worker)}"

    wait_until(lambda: len(scans(worker)) >= 2, WINDOW + 15, what="the run at the window's end")
    trailing = scans(worker)[1]
    assert trailing > last, "the deferred run starts after the last request it covers"
    assert trailing >= window_ends - 0.05, "and not before the window ends"

    # a request once the window is over runs at once again
    wait_until(
        lambda: worker.pttl(debounce_io.window_key(ORPHAN_VMS)) < 0, WINDOW + 5, what="the window to end"
    )
    after = request_and_wait(worker)
    wait_until(lambda: len(scans(worker)) >= 3, 10, what="the request after the window to scan")
    assert scans(worker)[2] > after
    assert len(scans(worker)) == 3, f"no extra scans: {scans(worker)}"
