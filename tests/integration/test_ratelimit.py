"""The shared token bucket holds its rate across processes, against a real Redis."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest
import redis

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


def _leased_worker(url: str, n: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    lease = LeasedTokens(SharedTokenBucket(redis.Redis.from_url(url), "t:leased", rate=400, burst=20))
    stamps = []
    for _ in range(n):
        lease.take()
        stamps.append(time.time())
    out.put(stamps)


def test_leases_in_two_processes_still_share_one_budget(redis_url: str) -> None:
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [ctx.Process(target=_leased_worker, args=(redis_url, 200, out)) for _ in range(2)]
    for p in procs:
        p.start()
    stamps = sorted(out.get(timeout=60) + out.get(timeout=60))
    for p in procs:
        p.join(10)
    # 400 tokens at 400/s with a burst of 20: at least (400 - 20) / 400 = 0.95 s for both together
    assert stamps[-1] - stamps[0] >= 0.9


def _tokens_in_redis(redis_client: redis.Redis, key: str) -> float:
    return float(redis_client.hget(key, "tokens") or 0)


def test_a_lease_takes_a_batch_per_round_trip_and_drops_what_its_window_did_not_use(
    redis_client: redis.Redis,
) -> None:
    now = [1000.0]
    bucket = SharedTokenBucket(redis_client, "t:lease", rate=1000, burst=1000, clock=lambda: now[0])
    lease = LeasedTokens(bucket, window=0.05, clock=lambda: now[0])
    assert lease.batch == 50
    for _ in range(50):
        assert lease.take() == 0.0
    assert _tokens_in_redis(redis_client, "t:lease") == 950, "50 takes, one reservation of 50"
    lease.take()
    assert _tokens_in_redis(redis_client, "t:lease") == 900, "the 51st take reserved the next batch"
    now[0] += 0.06  # the window ends with 49 tokens unused: they are not spent later
    lease.take()
    assert _tokens_in_redis(redis_client, "t:lease") == pytest.approx(900 + 60 - 50)


def test_at_low_rates_a_lease_is_the_bucket_itself(redis_client: redis.Redis) -> None:
    now = [1000.0]
    bucket = SharedTokenBucket(redis_client, "t:low", rate=20, burst=30, clock=lambda: now[0])
    lease = LeasedTokens(bucket, window=0.05, clock=lambda: now[0])
    assert lease.batch == 1
    lease.take()
    lease.take()
    assert _tokens_in_redis(redis_client, "t:low") == 28


def test_a_lease_waits_as_long_as_its_batch_needs(redis_client: redis.Redis) -> None:
    now = [1000.0]
    slept: list[float] = []
    bucket = SharedTokenBucket(
        redis_client, "t:wait", rate=1000, burst=50, clock=lambda: now[0], sleep=slept.append
    )
    lease = LeasedTokens(bucket, window=0.05, clock=lambda: now[0])
    for _ in range(50):
        lease.take()
    assert lease.take() == pytest.approx(0.05)  # the next batch of 50 is 50 ms away
    assert slept == [pytest.approx(0.05)]
    for _ in range(49):
        assert lease.take() == 0.0
