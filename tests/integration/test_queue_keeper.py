"""The keeper thread against a real Redis: it sleeps until the first due time it knows of and is
woken by the scripts when a key is scheduled before every other, so an idle fleet does not poll the
delayed sets several times a second, and a countdown is still published as soon as it is due."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis

from mcm_sandbox.procs import wait_until
from mcm_tasks.queue import enqueue_after, registry
from mcm_tasks.queue.keeper import Keeper, parse_wake, repair_turn_key, take_repair_turn
from mcm_tasks.queue.messages import build_message, queue_keys, workers_key
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


def test_an_idle_keeper_repairs_without_reading_the_delayed_sets_between_repairs(
    client: redis.Redis,
) -> None:
    """Issue 19: the backstop read (one ZRANGE per kind) ran at every sweep, most of a resting
    worker's Redis commands; it now runs only with the repair, every worker_lost_timeout / 2."""
    keeper = Keeper("w-test@host", get_settings().model_copy(update={"worker_lost_timeout": 2.0}))
    keeper.start()
    try:
        wait_until(lambda: keeper.repairs >= 1, timeout=10, interval=0.02, what="the first repair")
        reads, repairs = keeper.due_reads, keeper.repairs
        wait_until(lambda: keeper.repairs >= repairs + 2, timeout=15, interval=0.02, what="two repairs")
        # one read per repair (one more if the counters were read between a repair and its read);
        # reading at every sweep (every 0.2 s here) made about ten
        assert keeper.due_reads - reads <= keeper.repairs - repairs + 1
    finally:
        keeper.stop()


def _held_by_a_dead_worker(client: redis.Redis, tag: str, key: str, at: float) -> None:
    """A message kombu delivered at ``at`` (its ``unacked`` entry and index time), whose worker
    then died: nobody renews it."""
    prefix = "mcm:broker:"
    message = json.loads(build_message("machine", key, f"id-{key}", "mcm.machine"))
    client.hset(prefix + "unacked", tag, json.dumps([message, "mcm.machine", "mcm.machine"]))
    client.zadd(prefix + "unacked_index", {tag: at})
    client.sadd(prefix + "_kombu.binding.mcm.machine", "mcm.machine\x06\x16\x06\x16mcm.machine")


def heartbeat(client: redis.Redis, worker: str) -> float:
    return float(client.zscore(workers_key(), worker) or 0.0)


def test_an_idle_keeper_sweeps_once_per_worker_lost_timeout_and_finds_a_dead_worker_in_time(
    client: redis.Redis,
) -> None:
    """Issue 19: the sweep ran every worker_lost_timeout / 10 whatever Redis held. It now runs when
    the oldest held message can first be found lost (the sweep reads it): with nothing held, once per
    worker_lost_timeout; and a dead worker's message is still restored when its time comes."""
    wlt = 2.0  # heartbeat every 0.4 s; the old sweep every 0.2 s
    keeper = Keeper("w-test@host", get_settings().model_copy(update={"worker_lost_timeout": wlt}))
    keeper.start()
    try:
        wait_until(lambda: keeper.sweeps >= 1, timeout=10, interval=0.02, what="the first sweep")
        sweeps, beat = keeper.sweeps, heartbeat(client, keeper.worker)
        # two heartbeats (0.8 s): the old pace swept four times meanwhile
        wait_until(lambda: heartbeat(client, keeper.worker) >= beat + 0.7, timeout=10, interval=0.02,
                   what="two heartbeats")  # fmt: skip
        assert keeper.sweeps - sweeps <= 1

        delivered = time.time()  # a message delivered now, to a worker that dies at once
        _held_by_a_dead_worker(client, "dead-tag", "lost", delivered)
        wait_until(lambda: queued(client, "machine") == 1, timeout=wlt + 10, interval=0.02,
                   what="the dead worker's message restored")  # fmt: skip
        assert time.time() >= delivered + wlt, "restored only once it may be lost"
        # the keeper counts it after the script returns: the message may be seen on its queue first
        wait_until(lambda: keeper.restored == 1, timeout=5, interval=0.02, what="the restore counted")
    finally:
        keeper.stop()


def test_one_keeper_of_the_fleet_repairs_per_period(client: redis.Redis) -> None:
    """The repair and the backstop read look at shared state: of N workers' keepers, the first to
    ask in a period runs them (N used to run 16 script calls each per period)."""
    settings = get_settings()
    every = 5.0
    assert take_repair_turn(client, "w1@host", every, settings)
    assert not take_repair_turn(client, "w2@host", every, settings), "w1's turn this period"
    client.pexpire(repair_turn_key(settings), 1)  # the period ends
    wait_until(lambda: take_repair_turn(client, "w2@host", every, settings), timeout=5, interval=0.01,
               what="w2's turn in the next period")  # fmt: skip


def test_the_repair_forgets_workers_dead_for_a_day(client: redis.Redis) -> None:
    settings = get_settings()
    client.zadd(workers_key(), {"gone@host": time.time() - 2 * 86400, "live@host": time.time()})
    assert take_repair_turn(client, "live@host", 5.0, settings)
    assert client.zrange(workers_key(), 0, -1) == ["live@host"]


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
    heard: list[tuple[float, str | None]] = []
    while (message := wake.get_message(timeout=0.5)) is not None:
        heard.append(parse_wake(message["data"]) or (0.0, ""))
    wake.close()
    assert [round(d - now) for d, _ in heard] == [60, 90, 30]
    assert {view for _, view in heard} == {get_settings().key_prefix}  # each names its set's view
