"""What the queue contract costs Redis, counted by a real Redis (INFO commandstats): the figures
bench/scale.py measures per machine, pinned per delivery and per publisher pass."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import pytest
import redis

from informers.events import Routing
from informers.sink import QueueSink, send_routing
from mcm_tasks.queue import (
    Requeue,
    concurrency,
    enqueue,
    enqueue_after,
    expectations,
    register_reconciler,
    registry,
)
from mcm_tasks.queue.history import read_history
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.queue.processing import process
from mcm_tasks.queue.producer import publish_due
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, get_settings, reset_settings
from tests.integration.queue_support import CountingConnection

pytestmark = pytest.mark.integration


@pytest.fixture()
def client(redis_url: str) -> Iterator[redis.Redis]:
    configure({"redis_url": redis_url, "concurrent_syncs": 2, "history_length": 5})
    registry.unregister_all()
    registry.load_reconciler_modules([])
    yield get_redis()
    registry.unregister_all()
    reset_settings()


def script_calls(client: redis.Redis) -> int:
    """EVALSHA calls so far (INFO commandstats; the commands scripts run are counted apart)."""
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def counting_client(url: str) -> redis.Redis:
    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection, decode_responses=True)
    return redis.Redis(connection_pool=pool)


def deliver_counted(client: redis.Redis, url: str, kind: str) -> tuple[str, int, int, int]:
    """Deliver the next message with a client of its own: (status, script calls, round trips,
    commands sent)."""
    key, message_id = take(client, kind)
    counted = counting_client(url)
    counted.ping()
    before = script_calls(client), CountingConnection.sent, CountingConnection.commands
    status = process(kind, key, message_id, counted)
    spent = (
        script_calls(client) - before[0],
        CountingConnection.sent - before[1],
        CountingConnection.commands - before[2],
    )
    return (status, *spent)


def take(client: redis.Redis, kind: str) -> tuple[str, str]:
    raw = client.rpop(queue_keys(kind).broker_list)
    assert isinstance(raw, str), "no message"
    message = json.loads(raw)
    (key,), _, _ = json.loads(base64.b64decode(message["body"]))
    return key, message["headers"]["id"]


@pytest.mark.parametrize("result", [None, Requeue(30)])
def test_a_delivery_costs_two_script_calls(
    client: redis.Redis, redis_url: str, result: Requeue | None
) -> None:
    """BEGIN and END, one script call and one round trip each: the key's history and its
    --concurrent-syncs slot are steps of those scripts, not calls of their own."""
    register_reconciler("machine", lambda key: result)
    for key in ("ns/warm", "ns/a"):  # the first delivery loads the scripts
        enqueue("machine", key)
        status, *spent = deliver_counted(client, redis_url, "machine")
        assert status == "run"
    assert spent == [2, 2, 2]  # script calls, round trips, commands
    # and both steps happened: the run is in the history, complete, and its slot was given back
    (run,) = read_history("machine", "ns/a", client)
    assert run.end is not None and run.outcome
    assert concurrency.holders(client, "machine", get_settings()) == 0


def test_a_delivery_that_finds_no_slot_leaves_no_history(client: redis.Redis, redis_url: str) -> None:
    settings = get_settings()
    register_reconciler("node", lambda key: None)
    enqueue("node", "warm")
    assert deliver_counted(client, redis_url, "node")[0] == "run"
    assert concurrency.acquire(client, "node", "other-1", settings)
    assert concurrency.acquire(client, "node", "other-2", settings)
    enqueue("node", "n1")
    assert deliver_counted(client, redis_url, "node") == ("busy", 2, 2, 2)
    assert read_history("node", "n1", client) == []
    assert concurrency.holders(client, "node", settings) == 2


def test_the_publisher_asks_every_kind_in_one_script_call(client: redis.Redis, redis_url: str) -> None:
    """A keeper's pass over the eight delayed sets is one round trip when nothing is due, two when
    something is (find, then publish), whatever the number of kinds."""
    counted = counting_client(redis_url)
    enqueue_after("machine", "ns/warm", 0.5)
    assert publish_due(counted, time.time() + 1)[0] == 1  # loads the scripts
    client.delete(queue_keys("machine").broker_list)
    enqueue_after("machine", "ns/later", 30)
    enqueue_after("node", "n-later", 60)
    sent, commands = CountingConnection.sent, CountingConnection.commands
    published, next_due = publish_due(counted)
    assert (published, CountingConnection.sent - sent, CountingConnection.commands - commands) == (0, 1, 1)
    assert next_due == pytest.approx(time.time() + 30, abs=5)
    sent, commands = CountingConnection.sent, CountingConnection.commands
    published, next_due = publish_due(counted, time.time() + 45)
    assert (published, CountingConnection.sent - sent, CountingConnection.commands - commands) == (1, 2, 2)
    assert next_due == pytest.approx(time.time() + 60, abs=5)
    assert client.llen(queue_keys("machine").broker_list) == 1


def test_an_informer_batch_is_one_round_trip(client: redis.Redis, redis_url: str) -> None:
    """What one batch of events asks for, expectations lowered first, then the keys at once and the
    keys that wait for the batch period: one round trip for all of it."""
    sink = QueueSink(counting_client(redis_url))

    def routing(n: int) -> Routing:
        r = Routing()
        r.add("machine", f"ns/m{n}")
        r.add("machineset", "ns/s", batched=True)
        r.creations_observed.append("ns/s")
        r.deletions_observed[("ns/s", f"old-{n}")] = None
        return r

    expectations.expect_creations("ns/s", 2)
    send_routing(sink, routing(0))  # loads the scripts
    sent = CountingConnection.sent
    assert send_routing(sink, routing(1)) == 2  # one message published, one key batched
    assert CountingConnection.sent - sent == 1
    assert expectations.satisfied("ns/s", client), "both creations were observed"
    assert client.zscore(queue_keys("machineset").delayed, "ns/s") is not None
    assert client.llen(queue_keys("machine").broker_list) == 2


def commands_run(client: redis.Redis) -> int:
    """Commands Redis ran so far, those inside scripts included (INFO commandstats), less the INFO
    calls that read them."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def test_inside_redis_a_delivery_runs_few_commands(client: redis.Redis, redis_url: str) -> None:
    """BEGIN and END of a plain successful run: 23 commands inside Redis (the 23rd: BEGIN's look at
    the standby marker, ``mcm_tasks.standby``, which costs no round trip). Not paid on every
    delivery: dropping a dead --concurrent-syncs holder (only when every slot is taken) and trimming
    the key's history (only once it is longer than --history-length)."""
    register_reconciler("machine", lambda key: None)
    for key in ("ns/warm", "ns/a"):  # the first delivery loads the scripts
        enqueue("machine", key)
        before = commands_run(client)
        status, calls, _, _ = deliver_counted(client, redis_url, "machine")
        spent = commands_run(client) - before
    assert (status, calls) == ("run", 2)
    assert spent - 2 - calls == 23  # less the RPOP and PING of deliver_counted, and the two EVALSHA


def test_inside_redis_the_publisher_asks_one_command_of_a_kind_with_nothing_due(client: redis.Redis) -> None:
    enqueue_after("machine", "ns/warm", 0.5)
    assert publish_due(client, time.time() + 1)[0] == 1  # loads the scripts
    enqueue_after("machine", "ns/later", 30)
    before = commands_run(client)
    assert publish_due(client)[0] == 0
    assert commands_run(client) - before == 1 + 8  # the script call, one ZRANGE per kind
