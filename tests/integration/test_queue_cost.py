"""What the queue contract costs Redis, counted by a real Redis (INFO commandstats): the figures
bench/scale.py measures per machine, pinned per delivery and per publisher pass."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest
import redis

from mcm_tasks.queue import Requeue, concurrency, enqueue, register_reconciler, registry
from mcm_tasks.queue.history import read_history
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.queue.processing import process
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, get_settings, reset_settings

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


class CountingConnection(redis.Connection):
    """Counts what a client sends: one send per command, or per pipeline (a round trip)."""

    sent = 0

    def send_packed_command(self, command: object, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)  # type: ignore[arg-type]


def counting_client(url: str) -> redis.Redis:
    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection, decode_responses=True)
    return redis.Redis(connection_pool=pool)


def deliver_counted(client: redis.Redis, url: str, kind: str) -> tuple[str, int, int]:
    """Deliver the next message with a client of its own: (status, script calls, round trips)."""
    key, message_id = take(client, kind)
    counted = counting_client(url)
    counted.ping()
    before_scripts, before_sent = script_calls(client), CountingConnection.sent
    status = process(kind, key, message_id, counted)
    return status, script_calls(client) - before_scripts, CountingConnection.sent - before_sent


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
        status, scripts, round_trips = deliver_counted(client, redis_url, "machine")
        assert status == "run"
    assert (scripts, round_trips) == (2, 2)
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
    assert deliver_counted(client, redis_url, "node") == ("busy", 2, 2)
    assert read_history("node", "n1", client) == []
    assert concurrency.holders(client, "node", settings) == 2
