"""The keeper thread against a real Redis: it sleeps until the first due time it knows of and is
woken by the scripts when a key is scheduled before every other, so an idle fleet does not poll the
delayed sets several times a second, and a countdown is still published as soon as it is due."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from mcm_sandbox.procs import wait_until
from mcm_tasks.queue import enqueue_after, registry
from mcm_tasks.queue.keeper import Keeper
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, get_settings, reset_settings

pytestmark = pytest.mark.integration

#: a sweep every 2 s, a heartbeat every 20 s, the backstop read (with the repair) every 50 s;
#: a due key polled for every 50 ms
SETTINGS = {"worker_lost_timeout": 100, "visibility_timeout": 600, "delayed_publish_interval": 0.05}


@pytest.fixture()
def client(redis_url: str) -> Iterator[redis.Redis]:
    configure({"redis_url": redis_url, **SETTINGS})
    registry.unregister_all()
    yield get_redis()
    reset_settings()


@pytest.fixture()
def keeper(client: redis.Redis) -> Iterator[Keeper]:
    keeper = Keeper("w-test@host", get_settings())
    keeper.start()
    wait_until(lambda: keeper.due_reads >= 1, timeout=10, interval=0.02, what="the keeper's first read")
    yield keeper
    keeper.stop()
    assert not keeper.is_alive()


def queued(client: redis.Redis, kind: str) -> int:
    return int(client.llen(queue_keys(kind).broker_list))


def test_a_countdown_wakes_the_keeper_which_does_not_poll_meanwhile(
    client: redis.Redis, keeper: Keeper
) -> None:
    enqueue_after("machine", "ns/later", 300)  # the first due time the keeper knows of: far away
    reads = keeper.due_reads
    enqueue_after("machine", "ns/soon", 0.5)  # before every other: the keeper hears of it
    wait_until(lambda: queued(client, "machine") == 1, timeout=10, interval=0.02, what="ns/soon published")
    # polling every delayed_publish_interval would have read about ten times by now; the keeper
    # reads when woken and when the key is due (and at most once more, at its sweep's backstop)
    assert keeper.due_reads - reads <= 3
    assert client.zscore(queue_keys("machine").delayed, "ns/later") is not None


def test_an_idle_keeper_sweeps_without_reading_the_delayed_sets(keeper: Keeper) -> None:
    """Issue 19: the backstop read (one ZRANGE per kind) ran at every sweep, most of a resting
    worker's Redis commands; it now runs with the repair, every worker_lost_timeout / 2."""
    reads, sweeps = keeper.due_reads, keeper.sweeps
    wait_until(lambda: keeper.sweeps >= sweeps + 2, timeout=15, interval=0.05, what="two sweeps")
    assert keeper.due_reads == reads


def test_only_a_due_time_before_every_other_of_its_set_is_published(client: redis.Redis) -> None:
    wake = client.pubsub()
    wake.subscribe(queue_keys("node").wake)
    assert (wake.get_message(timeout=5) or {}).get("type") == "subscribe"
    now = time.time()
    enqueue_after("node", "first", 60)
    enqueue_after("machineset", "other-set", 90)  # the first of its own set
    enqueue_after("node", "behind", 120)  # behind "first": the keepers know of an earlier one
    enqueue_after("node", "first", 200)  # later than its own: AddAfter keeps the earliest, no change
    enqueue_after("node", "sooner", 30)
    heard: list[float] = []
    while (message := wake.get_message(timeout=0.5)) is not None:
        heard.append(float(message["data"]))
    wake.close()
    assert [round(d - now) for d in heard] == [60, 90, 30]
