"""The permit giver against a real Redis: register, try, release, delete, stale holders and keys."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from mcm_tasks.permits import PermitGiver
from mcm_tasks.settings import configure, reset_settings


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def clock() -> Clock:
    return Clock()


@pytest.fixture()
def giver(redis_url: str, redis_client: redis.Redis, clock: Clock) -> Iterator[PermitGiver]:
    configure({"redis_url": redis_url, "permit_stale_after": "1h", "reconcile_lock_ttl": "60s"})
    yield PermitGiver(redis_client, clock=clock)
    reset_settings()


def test_an_unregistered_key_has_no_permits(giver: PermitGiver) -> None:
    assert giver.try_permit("dep", 0) is None


def test_one_permit_one_holder(giver: PermitGiver) -> None:
    giver.register_permits("dep", 1)
    token = giver.try_permit("dep", 0)
    assert token is not None
    assert giver.try_permit("dep", 0) is None
    assert giver.held("dep") == 1
    giver.release_permit("dep", token)
    assert giver.held("dep") == 0
    assert giver.try_permit("dep", 0) is not None


def test_permits_are_per_key_and_capacity_bounded(giver: PermitGiver) -> None:
    giver.register_permits("a", 2)
    giver.register_permits("b", 1)
    assert giver.try_permit("a", 0) is not None
    assert giver.try_permit("a", 0) is not None
    assert giver.try_permit("a", 0) is None
    assert giver.try_permit("b", 0) is not None


def test_shared_across_giver_instances(giver: PermitGiver, redis_url: str, clock: Clock) -> None:
    other = PermitGiver(redis.Redis.from_url(redis_url, decode_responses=True), clock=clock)
    giver.register_permits("dep", 1)
    other.register_permits("dep", 1)  # idempotent
    token = giver.try_permit("dep", 0)
    assert token is not None
    assert other.try_permit("dep", 0) is None
    giver.release_permit("dep", token)
    assert other.try_permit("dep", 0) is not None


def test_a_holder_past_its_lease_is_reclaimed(giver: PermitGiver, clock: Clock) -> None:
    giver.register_permits("dep", 1)
    assert giver.try_permit("dep", 0) is not None
    clock.now += 59
    assert giver.try_permit("dep", 0) is None
    clock.now += 2
    assert giver.try_permit("dep", 0) is not None


def test_delete_forgets_the_key(giver: PermitGiver) -> None:
    giver.register_permits("dep", 1)
    assert giver.try_permit("dep", 0) is not None
    giver.delete_permits("dep")
    assert giver.held("dep") == 0
    assert giver.try_permit("dep", 0) is None  # must be registered again


def test_stale_keys_expire(giver: PermitGiver, redis_client: redis.Redis) -> None:
    giver.register_permits("dep", 1)
    assert giver.try_permit("dep", 0) is not None
    keys = redis_client.keys("*permits:dep*")
    assert len(keys) == 2
    for key in keys:
        assert 3500 < int(redis_client.ttl(key)) <= 3600  # type: ignore[arg-type]


# --- waiting for a permit (timeout > 0) -----------------------------------------------------------------


class AttemptClock(Clock):
    """The giver reads its clock once per attempt to take a permit; counting the reads tells a test
    that a waiter failed its first attempt and is polling."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.polling = threading.Event()

    def __call__(self) -> float:
        self.reads += 1
        if self.reads >= 2:
            self.polling.set()
        return self.now


def held_elsewhere(giver: PermitGiver, client: redis.Redis) -> tuple[str, AttemptClock, PermitGiver]:
    """The one permit of "dep" taken by ``giver``; a second giver, counting its attempts, to wait."""
    giver.register_permits("dep", 1)
    held = giver.try_permit("dep", 0)
    assert held is not None
    clock = AttemptClock()
    return held, clock, PermitGiver(client, clock=clock)


@pytest.mark.timeout(60)
def test_a_waiter_gets_the_permit_released_within_its_timeout(
    giver: PermitGiver, redis_client: redis.Redis
) -> None:
    held, clock, waiter = held_elsewhere(giver, redis_client)
    released = threading.Event()

    def release_once_the_waiter_polls() -> None:
        if clock.polling.wait(10):
            giver.release_permit("dep", held)
            released.set()

    releaser = threading.Thread(target=release_once_the_waiter_polls, daemon=True)
    releaser.start()
    started = time.monotonic()
    token = waiter.try_permit("dep", 10.0)
    elapsed = time.monotonic() - started
    releaser.join(10)
    assert released.is_set()  # the holder gave it back while the waiter was polling
    assert token is not None and token != held
    assert clock.reads >= 2  # refused at first, taken by a later attempt
    assert elapsed < 5.0  # soon after the release, well before its timeout ran out
    assert giver.held("dep") == 1
    assert giver.try_permit("dep", 0) is None  # the waiter holds it now


@pytest.mark.timeout(60)
def test_a_waiter_gives_up_after_its_timeout_when_nobody_releases(
    giver: PermitGiver, redis_client: redis.Redis
) -> None:
    held, clock, waiter = held_elsewhere(giver, redis_client)
    started = time.monotonic()
    assert waiter.try_permit("dep", 1.0) is None
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 5.0  # it waited its timeout, then gave up (not never, not twice as long)
    assert clock.reads > 2  # it kept trying while it waited
    assert giver.held("dep") == 1  # the holder still has it
    giver.release_permit("dep", held)
    assert waiter.try_permit("dep", 0) is not None
