"""``--concurrent-syncs`` caps the reconciles of one kind running at once across all workers,
through a Redis semaphore; a delivery finding no slot hands its key back without a failure."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import pytest
import redis

from mcm_tasks.queue import concurrency, enqueue, register_reconciler, registry
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.queue.processing import process
from mcm_tasks.queue.producer import publish_due
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, get_settings, reset_settings

pytestmark = pytest.mark.integration


@pytest.fixture()
def client(redis_url: str) -> Iterator[redis.Redis]:
    configure({"redis_url": redis_url, "concurrent_syncs": 2, "reconcile_lock_ttl": 5})
    registry.unregister_all()
    registry.load_reconciler_modules([])
    yield get_redis()
    registry.unregister_all()
    reset_settings()


def deliver(client: redis.Redis, kind: str) -> str:
    raw = client.rpop(queue_keys(kind).broker_list)
    assert isinstance(raw, str), "no message"
    message = json.loads(raw)
    (key,), _, _ = json.loads(base64.b64decode(message["body"]))
    return process(kind, key, message["headers"]["id"], message["headers"]["eta"] is not None)


def test_third_reconcile_of_a_kind_waits_while_two_run(client: redis.Redis) -> None:
    settings = get_settings()
    # two reconciles of the kind are running elsewhere in the fleet
    assert concurrency.acquire(client, "machine", "other-1", settings)
    assert concurrency.acquire(client, "machine", "other-2", settings)
    calls: list[str] = []
    register_reconciler("machine", lambda key: calls.append(key))
    register_reconciler("machineset", lambda key: calls.append(key))
    enqueue("machine", "ns/a")
    enqueue("machineset", "ns/s")
    assert deliver(client, "machine") == "busy"
    assert calls == [] and client.hget(queue_keys("machine").failures, "ns/a") is None
    assert deliver(client, "machineset") == "run", "another kind has its own slots"
    concurrency.release(client, "machine", "other-1", settings)
    # the key comes back by itself after a short countdown, and runs now that a slot is free
    assert client.zscore(queue_keys("machine").delayed, "ns/a") is not None
    assert publish_due(client, time.time() + 1)[0] == 1
    assert client.llen(queue_keys("machine").broker_list) == 1
    assert deliver(client, "machine") == "run"
    assert calls == ["ns/s", "ns/a"]
    assert concurrency.holders(client, "machine", settings) == 1, "a finished reconcile gives its slot back"


def test_slot_of_a_killed_worker_ages_out(client: redis.Redis) -> None:
    settings = get_settings()
    assert concurrency.acquire(client, "node", "dead-1", settings, now=100.0)
    assert concurrency.acquire(client, "node", "dead-2", settings, now=100.0)
    assert not concurrency.acquire(client, "node", "new", settings, now=104.0)
    assert concurrency.acquire(client, "node", "new", settings, now=105.1), "past --reconcile-lock-ttl"


def test_the_slot_is_taken_when_begin_had_to_be_loaded_first(client: redis.Redis) -> None:
    """BEGIN refused NOSCRIPT (a restarted Redis, new settings) and loaded again: the slot is a step
    of BEGIN, and the delivery must still respect the cap."""
    settings = get_settings()
    client.script_flush()
    assert concurrency.acquire(client, "machine", "other-1", settings)
    assert concurrency.acquire(client, "machine", "other-2", settings)
    register_reconciler("machine", lambda key: None)
    enqueue("machine", "ns/b")
    assert deliver(client, "machine") == "busy"
    concurrency.release(client, "machine", "other-1", settings)
    concurrency.release(client, "machine", "other-2", settings)
