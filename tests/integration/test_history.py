"""A key's history in Redis: one entry per run, written at start and completed at the end in the
round trips the contract makes anyway, bounded, and silent about deliveries that did not run."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest
import redis

from mcm_tasks.queue import concurrency, enqueue, register_reconciler, registry
from mcm_tasks.queue.history import read_history
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.queue.processing import deliver as run_delivery
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, get_settings, reset_settings

pytestmark = pytest.mark.integration


@pytest.fixture()
def client(redis_url: str) -> Iterator[redis.Redis]:
    configure({"redis_url": redis_url, "history_length": 3, "concurrent_syncs": 1, "error_backoff_base": 0})
    registry.unregister_all()
    registry.load_reconciler_modules([])
    yield get_redis()
    registry.unregister_all()
    reset_settings()


def take(client: redis.Redis, kind: str) -> tuple[str, str]:
    raw = client.rpop(queue_keys(kind).broker_list)
    assert isinstance(raw, str), "no message"
    message = json.loads(raw)
    (key,), _, _ = json.loads(base64.b64decode(message["body"]))
    return key, message["headers"]["id"]


def test_each_run_is_recorded_with_its_outcome_and_the_list_is_bounded(client: redis.Redis) -> None:
    calls: list[str] = []

    def reconcile(key: str) -> None:
        calls.append(key)
        if len(calls) == 2:
            raise RuntimeError("token=abcdefabcdefabcdefabcdefabcdefabcdef went wrong")

    register_reconciler("machine", reconcile)
    for _ in range(5):
        enqueue("machine", "ns/m")
        key, mid = take(client, "machine")
        run_delivery("machine", key, mid, worker="w1@host")
    runs = read_history("machine", "ns/m")
    assert len(runs) == 3 and all(r.end is not None and r.worker.startswith("w1@host/") for r in runs)
    assert [r.outcome for r in runs] == ["done", "done", "done"]
    assert 0 < client.ttl("mcm:q:machine:history:ns/m") <= 7 * 24 * 3600
    # the failed run (the second of five) has gone out of the window of three; run again to see one
    client.delete("mcm:q:machine:history:ns/m")
    register_reconciler("machine", lambda key: (_ for _ in ()).throw(RuntimeError("password=hunter2 no")))
    enqueue("machine", "ns/m")
    key, mid = take(client, "machine")
    run_delivery("machine", key, mid)
    (failed,) = read_history("machine", "ns/m")
    assert failed.error == "RuntimeError: password=<redacted> no" and failed.outcome.startswith("retry in")


def test_a_delivery_that_does_not_run_leaves_no_entry(client: redis.Redis) -> None:
    register_reconciler("machine", lambda key: None)
    assert concurrency.acquire(client, "machine", "elsewhere", get_settings())
    enqueue("machine", "ns/busy")
    key, mid = take(client, "machine")
    assert run_delivery("machine", key, mid).status == "busy"
    assert read_history("machine", "ns/busy") == []
    concurrency.release(client, "machine", "elsewhere", get_settings())


def test_history_length_0_keeps_none(client: redis.Redis) -> None:
    configure({"redis_url": get_settings().redis_url, "history_length": 0})
    register_reconciler("machine", lambda key: None)
    enqueue("machine", "ns/quiet")
    key, mid = take(client, "machine")
    assert run_delivery("machine", key, mid).status == "run"
    assert read_history("machine", "ns/quiet") == []
