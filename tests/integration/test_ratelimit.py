"""The shared token bucket holds its rate across processes, against a real Redis."""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import pytest
import redis

from mcm_tasks.kube.ratelimit import cluster_bucket
from mcm_tasks.ratelimit import LeasedTokens, SharedTokenBucket

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


def _leased_worker(url: str, seconds: float, barrier: Any, out: mp.Queue) -> None:  # type: ignore[type-arg]
    tokens = LeasedTokens(SharedTokenBucket(redis.Redis.from_url(url), "t:leased", rate=200, burst=10))
    barrier.wait(60)
    start = time.time()
    n = 0
    while time.time() - start < seconds:
        tokens.take()
        n += 1
    out.put((start, time.time(), n))


def test_leased_tokens_keep_the_fleet_budget(redis_url: str) -> None:
    """Three busy processes drawing batches from one bucket spend no more than it grants:
    burst + rate × elapsed, token for token."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_leased_worker, args=(redis_url, 1.5, barrier, out)) for _ in range(3)]
    for p in procs:
        p.start()
    runs = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
    start, end = min(r[0] for r in runs), max(r[1] for r in runs)
    spent = sum(r[2] for r in runs)
    assert spent <= 10 + 200 * (end - start) + 1, (spent, end - start)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def test_a_busy_process_pays_one_round_trip_per_batch(redis_url: str, redis_client: redis.Redis) -> None:
    """The kube API limiter of a process making a request every millisecond goes to Redis for a
    batch of tokens, not for each one (INFO commandstats counts the script calls)."""
    clock = _Clock()
    tokens = cluster_bucket("c", qps=2000, burst=2000, redis_url=redis_url)
    assert isinstance(tokens, LeasedTokens)
    tokens.bucket.clock = tokens.clock = clock
    before = _evalsha_calls(redis_client)
    for _ in range(1000):
        assert tokens.take() == 0.0
        clock.now += 0.001
    calls = _evalsha_calls(redis_client) - before
    assert calls == tokens.draws
    assert calls <= 30, calls  # batches 1, 2, 4, … then 0.1 s of use (100); one call per token before


def test_leased_tokens_draw_one_at_a_time_when_the_bucket_is_short(redis_client: redis.Redis) -> None:
    """An empty bucket grants one token with its wait, as the bucket itself does: no batch is
    reserved ahead, so nobody waits for tokens another process holds unused."""
    clock = _Clock()
    bucket = SharedTokenBucket(redis_client, "t:short", rate=10, burst=2, clock=clock, sleep=lambda s: None)
    tokens = LeasedTokens(bucket, clock=clock)
    waits = [tokens.take() for _ in range(4)]
    assert waits == [0.0, 0.0, pytest.approx(0.1), pytest.approx(0.2)]
    assert float(redis_client.hget("t:short", "tokens") or 0) == pytest.approx(-2.0)


def test_a_stock_goes_with_time_and_fork(redis_client: redis.Redis) -> None:
    """Tokens not spent within ``hold`` are dropped (never spent late), and a forked child does not
    spend its parent's stock."""
    clock = _Clock()
    bucket = SharedTokenBucket(redis_client, "t:stock", rate=1000, burst=1000, clock=clock)
    tokens = LeasedTokens(bucket, clock=clock, hold=0.5)
    for _ in range(20):  # grow the batches
        tokens.take()
        clock.now += 0.0001
    assert tokens._stock > 0
    clock.now += 1.0
    draws = tokens.draws
    tokens.take()
    assert tokens.draws == draws + 1  # the old stock was dropped, a new draw made
    tokens._pid = -1  # as in a forked child
    tokens.take()
    assert tokens.draws == draws + 2
