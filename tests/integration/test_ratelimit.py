"""The shared token bucket holds its rate across processes, against a real Redis."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest
import redis

from mcm_tasks.ratelimit import SharedTokenBucket

pytestmark = pytest.mark.integration


def _worker(url: str, n: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    bucket = SharedTokenBucket(redis.Redis.from_url(url), "t:bucket", rate=50, burst=5)
    stamps = []
    for _ in range(n):
        bucket.take()
        stamps.append(time.time())
    out.put(stamps)


def test_two_processes_share_one_budget(redis_url: str) -> None:
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [ctx.Process(target=_worker, args=(redis_url, 30, out)) for _ in range(2)]
    for p in procs:
        p.start()
    stamps = sorted(out.get(timeout=60) + out.get(timeout=60))
    for p in procs:
        p.join(10)
    # 60 tokens at 50/s with a burst of 5: at least (60 - 5) / 50 = 1.1 s for both together.
    # Two independent per-process limiters would finish in half that.
    assert stamps[-1] - stamps[0] >= 1.0


def test_clock_driven_refill_and_try_take(redis_client: redis.Redis) -> None:
    now = [1000.0]
    bucket = SharedTokenBucket(redis_client, "t:b2", rate=10, burst=2, clock=lambda: now[0])
    assert bucket.try_take() and bucket.try_take()
    assert not bucket.try_take()
    assert bucket.reserve() == pytest.approx(0.1)
    now[0] += 0.2
    assert bucket.try_take()


def test_reserve_within_hands_back_what_it_refuses(redis_client: redis.Redis) -> None:
    now = [1000.0]
    bucket = SharedTokenBucket(redis_client, "t:b3", rate=10, burst=1, clock=lambda: now[0])
    assert bucket.reserve_within(0.0) == 0.0
    # the next token is 0.1 s away: refused within 0.05 s, and the refusal reserved nothing
    assert bucket.reserve_within(0.05) is None
    assert bucket.reserve_within(0.2) == pytest.approx(0.1)
    assert bucket.reserve_within(0.05) is None
    now[0] += 0.2
    assert bucket.try_take()
