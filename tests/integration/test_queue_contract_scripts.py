"""The contract's Redis scripts against a real Redis, one delivery at a time.

These tests act as the worker themselves (pop the message Celery would deliver, run
``process`` on it), so every interleaving is deterministic. The same code runs inside real
Celery workers in test_queue_contract_workers.py.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest

from informers.events import Routing
from informers.sink import QueueSink
from informers.sink import deliver as deliver_routing
from mcm_sandbox.procs import wait_until
from mcm_tasks.queue import Requeue, enqueue, enqueue_after, enqueue_many, register_reconciler, registry
from mcm_tasks.queue import expectations as exp
from mcm_tasks.queue.deadletter import list_dead_letters, replay, replay_all
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.queue.metrics import register_queue_metrics
from mcm_tasks.queue.processing import process
from mcm_tasks.queue.producer import enqueue_many_after
from mcm_tasks.queue.stats import read_stats
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, reset_settings

pytestmark = pytest.mark.integration

#: a visibility timeout short enough to see a countdown capped, with every requeue below half of it
SHORT_VISIBILITY = {
    "visibility_timeout": 1.0,
    "long_retry": 0.4,
    "resource_exhausted_retry": 0.4,
    "class_resync_period": 0.4,
}
SETTINGS = {
    "reconcile_lock_ttl": 5,
    "visibility_timeout": 60,
    "long_retry": 30,
    "resource_exhausted_retry": 30,
    "class_resync_period": 30,
    "dead_letter_after": 3,
    "error_backoff_base": 0.5,
    "error_backoff_max": 10,
    "expectations_timeout": 30,
}


@dataclass
class Delivery:
    id: str
    key: str
    eta: float | None

    @property
    def delayed(self) -> bool:
        return self.eta is not None


@pytest.fixture()
def client(redis_url: str) -> Iterator[redis.Redis]:
    configure({"redis_url": redis_url, **SETTINGS})
    registry.unregister_all()
    registry.load_reconciler_modules([])
    yield get_redis()
    registry.unregister_all()
    reset_settings()


def messages(client: redis.Redis, kind: str) -> int:
    return int(client.llen(queue_keys(kind).broker_list))


def take(client: redis.Redis, kind: str) -> Delivery:
    """The next message in delivery order (kombu LPUSHes and BRPOPs)."""
    raw = client.rpop(queue_keys(kind).broker_list)
    assert isinstance(raw, str), "no message"
    message = json.loads(raw)
    (key,), _, _ = json.loads(base64.b64decode(message["body"]))
    eta = message["headers"]["eta"]
    return Delivery(message["headers"]["id"], key, datetime.fromisoformat(eta).timestamp() if eta else None)


def deliver(client: redis.Redis, kind: str) -> str:
    d = take(client, kind)
    return process(kind, d.key, d.id, d.delayed)


def recorder(calls: list[str], result: Callable[[str], Requeue | None] = lambda key: None):  # type: ignore[no-untyped-def]
    def reconcile(key: str) -> Requeue | None:
        calls.append(key)
        return result(key)

    return reconcile


def test_coalescing_one_message_per_waiting_key(client: redis.Redis) -> None:
    assert enqueue("machine", "ns/a") is True
    assert [enqueue("machine", "ns/a") for _ in range(4)] == [False] * 4
    assert (
        enqueue_many([("machine", "ns/a"), ("machine", "ns/b"), ("machine", "ns/b"), ("node", "ns/a")]) == 2
    )
    assert messages(client, "machine") == 2 and messages(client, "node") == 1
    calls: list[str] = []
    register_reconciler("machine", recorder(calls))
    assert deliver(client, "machine") == "run"
    assert enqueue("machine", "ns/a") is True, "once it ran, the key can be added again"


def test_event_during_a_reconcile_causes_exactly_one_more(client: redis.Redis) -> None:
    calls: list[str] = []

    def reconcile(key: str) -> None:
        calls.append(key)
        if len(calls) == 1:
            assert [enqueue("machine", key) for _ in range(3)] == [False] * 3  # running: marked dirty
            assert messages(client, "machine") == 0

    register_reconciler("machine", reconcile)
    enqueue("machine", "k")
    assert deliver(client, "machine") == "run"
    assert messages(client, "machine") == 1, "the dirty key went back once"
    assert deliver(client, "machine") == "run"
    assert calls == ["k", "k"] and messages(client, "machine") == 0


def test_a_second_delivery_while_running_waits_for_the_first(client: redis.Redis) -> None:
    inner: list[str] = []

    def reconcile(key: str) -> None:
        inner.append(key)
        if len(inner) == 1:
            enqueue_after("machine", key, 0.001)  # a countdown message for the same key arrives now
            assert deliver(client, "machine") == "busy"

    register_reconciler("machine", reconcile)
    enqueue("machine", "k")
    assert deliver(client, "machine") == "run"
    assert inner == ["k"], "the busy delivery did not run the reconciler"
    assert deliver(client, "machine") == "run"
    assert inner == ["k", "k"]


def test_redelivery_of_a_message_whose_worker_died_takes_over_and_counts_a_failure(
    client: redis.Redis,
) -> None:
    def dies(key: str) -> None:
        raise SystemExit("worker killed")  # not an Exception: the contract's end step never runs

    register_reconciler("machine", dies)
    enqueue("machine", "k")
    d = take(client, "machine")
    with pytest.raises(SystemExit):
        process("machine", "k", d.id, False)
    assert enqueue("machine", "k") is False, "still locked by the dead run"
    with pytest.raises(SystemExit):
        process("machine", "k", d.id, False)  # same message redelivered: takes the lock over
    assert client.hget(queue_keys("machine").failures, "k") == "1"
    with pytest.raises(SystemExit):
        process("machine", "k", d.id, False)
    assert process("machine", "k", d.id, False) == "dead", "a crash loop ends in the dead letter"
    [entry] = list_dead_letters()
    assert (entry.kind, entry.key, entry.error, entry.count) == ("machine", "k", "WorkerLost", 3)
    register_reconciler("machine", lambda key: None)
    assert replay("machine", "k") and deliver(client, "machine") == "run"
    assert list_dead_letters() == [] and client.hget(queue_keys("machine").failures, "k") is None


def test_countdowns_keep_only_the_earliest(client: redis.Redis) -> None:
    calls: list[str] = []
    register_reconciler("machineset", recorder(calls))
    enqueue_after("machineset", "s", 10)
    enqueue_after("machineset", "s", 2)
    enqueue_after("machineset", "s", 5)
    assert messages(client, "machineset") == 2 and read_stats()[2].delayed == 1
    late, early = take(client, "machineset"), take(client, "machineset")
    assert late.eta and early.eta and early.eta < late.eta
    assert process("machineset", "s", early.id, True) == "run"
    assert process("machineset", "s", late.id, True) == "superseded"
    assert calls == ["s"]


def test_countdown_firing_while_an_immediate_message_waits_coalesces(client: redis.Redis) -> None:
    register_reconciler("node", lambda key: None)
    enqueue_after("node", "n", 1)
    countdown = take(client, "node")
    enqueue("node", "n")
    assert process("node", "n", countdown.id, True) == "coalesced"
    assert deliver(client, "node") == "run"


def test_a_batch_of_wakeups_is_one_countdown_per_key_and_never_delays_an_earlier_one(
    client: redis.Redis,
) -> None:
    calls: list[str] = []
    register_reconciler("machineset", recorder(calls))
    enqueue_after("machineset", "early", 0.2)
    enqueue_many_after([("machineset", "a"), ("machineset", "b"), ("machineset", "early")], 5)
    enqueue_many_after([("machineset", "a")], 5)  # a later event of the same burst: nothing new
    deliveries = [take(client, "machineset") for _ in range(messages(client, "machineset"))]
    by_key: dict[str, list[Delivery]] = {}
    for d in deliveries:
        by_key.setdefault(d.key, []).append(d)
    assert sorted(by_key) == ["a", "b", "early"]
    assert len(by_key["a"]) == 1 and by_key["a"][0].eta is not None
    # the earlier countdown keeps its due time: the batch's later one publishes nothing
    assert len(by_key["early"]) == 1 and by_key["early"][0].eta == deliveries[0].eta
    for d in deliveries:
        assert process("machineset", d.key, d.id, True) == "run"
    assert sorted(calls) == ["a", "b", "early"]


@pytest.mark.parametrize("period", [0.0, 0.5])
def test_the_informer_sends_a_machine_s_set_wakeup_after_the_batch_period(
    client: redis.Redis, period: float
) -> None:
    configure({"redis_url": _url(client), **SETTINGS, "machine_updates_batch_period": period})
    routing = Routing()
    routing.add("machineset", "s", batched=True)
    routing.add("machine", "m")
    sent_at = time.time()
    assert deliver_routing(QueueSink(), routing) == 2
    assert take(client, "machine").eta is None
    wakeup = take(client, "machineset")
    if period:
        assert wakeup.eta is not None and wakeup.eta - sent_at == pytest.approx(period, abs=0.2)
    else:
        assert wakeup.eta is None


def test_a_batch_with_no_period_is_sent_at_once(client: redis.Redis) -> None:
    enqueue_many_after([("machineset", "now")], 0)
    assert take(client, "machineset").eta is None


def test_a_lost_message_blocks_its_key_only_until_its_marker_is_stale(client: redis.Redis) -> None:
    configure({"redis_url": _url(client), **SETTINGS, **SHORT_VISIBILITY})
    assert enqueue("secret", "s") is True
    client.delete(queue_keys("secret").broker_list)  # the message is lost, its marker remains
    assert enqueue("secret", "s") is False
    wait_until(lambda: enqueue("secret", "s"), timeout=10, what="a stale marker to stop coalescing")
    assert messages(client, "secret") == 1
    register_reconciler("secret", lambda key: None)
    assert deliver(client, "secret") == "run"


def _url(client: redis.Redis) -> str:
    kw = client.get_connection_kwargs()
    return f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"


def test_a_stale_duplicate_is_dropped_when_a_fresh_message_waits(client: redis.Redis) -> None:
    register_reconciler("machine", lambda key: None)
    enqueue("machine", "k")
    old = take(client, "machine")
    pending = queue_keys("machine").pending
    client.hset(pending, "k", f"0|{old.id}")  # its marker aged out
    assert enqueue("machine", "k") is True
    assert process("machine", "k", old.id, False) == "duplicate"
    assert deliver(client, "machine") == "run"


def test_errors_back_off_dead_letter_and_replay(client: redis.Redis) -> None:
    failing = {"on": True}

    def reconcile(key: str) -> None:
        if failing["on"]:
            raise RuntimeError("cloud said no; password=hunter2")

    register_reconciler("machine", reconcile)
    enqueue("machine", "m")
    assert deliver(client, "machine") == "run"
    for failures in (1, 2):
        assert client.hget(queue_keys("machine").failures, "m") == str(failures)
        retry = take(client, "machine")
        assert retry.eta is not None
        assert process("machine", "m", retry.id, True) == "run"
    assert messages(client, "machine") == 0, "dead-lettered keys stop retrying"
    [entry] = list_dead_letters()
    assert entry.count == 3 and entry.error == "RuntimeError" and "hunter2" not in entry.message
    assert read_stats()[0].retries == 2
    failing["on"] = False
    assert replay_all() == 1
    assert deliver(client, "machine") == "run"
    assert list_dead_letters() == [] and client.hget(queue_keys("machine").failures, "m") is None


def test_backoff_is_reset_by_success(client: redis.Redis) -> None:
    outcomes = iter([RuntimeError("x"), None, RuntimeError("y")])

    def reconcile(key: str) -> None:
        result = next(outcomes)
        if result:
            raise result

    register_reconciler("machine", reconcile)
    enqueue("machine", "m")
    deliver(client, "machine")
    first_retry = take(client, "machine")
    process("machine", "m", first_retry.id, True)
    assert client.hget(queue_keys("machine").failures, "m") is None
    enqueue("machine", "m")
    deliver(client, "machine")
    again = take(client, "machine")
    assert client.hget(queue_keys("machine").failures, "m") == "1", "counting starts over"
    assert again.eta is not None


def test_requeue_after_and_at_once(client: redis.Redis) -> None:
    results = iter([Requeue(3), Requeue(0), None])
    register_reconciler("machineclass", lambda key: next(results))
    enqueue("machineclass", "c")
    deliver(client, "machineclass")
    d = take(client, "machineclass")
    assert d.eta is not None
    process("machineclass", "c", d.id, True)
    d = take(client, "machineclass")
    assert d.eta is None, "Requeue(0) goes back at once"
    assert process("machineclass", "c", d.id, False) == "run" and messages(client, "machineclass") == 0


def test_missing_reconciler_is_a_failure_not_a_silent_drop(client: redis.Redis) -> None:
    enqueue("safety", "orphans")
    assert deliver(client, "safety") == "run"
    assert client.hget(queue_keys("safety").failures, "orphans") == "1"


def test_bad_input_is_refused_before_publishing(client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="unknown queue kind"):
        enqueue("pods", "x")
    with pytest.raises(ValueError, match="non-empty string"):
        enqueue_many([("machine", "ok"), ("machine", "")])
    assert messages(client, "machine") == 0


def test_metrics_are_exposed_with_mcm_names(client: redis.Redis) -> None:
    register_reconciler("machine", lambda key: None)
    enqueue_many([("machine", "a"), ("machine", "b")])
    deliver(client, "machine")
    registry_ = CollectorRegistry()
    register_queue_metrics(registry_)
    text = generate_latest(registry_).decode()
    assert 'mcm_workqueue_adds_total{name="machine"} 2.0' in text
    assert 'mcm_workqueue_depth{name="machine"} 1.0' in text
    assert 'mcm_workqueue_work_duration_seconds_count{name="machine"} 1.0' in text
    assert 'mcm_workqueue_queue_duration_seconds_count{name="machine"} 1.0' in text
    assert 'mcm_workqueue_retries_total{name="machine"} 0.0' in text
    assert 'mcm_workqueue_longest_running_processor_seconds{name="node"} 0.0' in text


def test_expectations(client: redis.Redis) -> None:
    assert exp.satisfied("ns/set")
    exp.expect_creations("ns/set", 2)
    assert not exp.satisfied("ns/set")
    exp.creation_observed("ns/set")
    assert not exp.satisfied("ns/set")
    exp.creation_observed("ns/set")
    assert exp.satisfied("ns/set")
    exp.expect_deletions("ns/set", ["m1", "m2", "m2"])
    exp.deletion_observed("ns/set", "m1")
    exp.deletion_observed("ns/set", "m1")
    exp.deletion_observed("ns/set", "other")
    assert not exp.satisfied("ns/set"), "m2 is still expected"
    exp.deletion_observed("ns/set", "m2")
    assert exp.satisfied("ns/set")
    exp.creation_observed("ns/gone")
    assert exp.satisfied("ns/gone"), "observing without a record creates none"
    exp.expect_creations("ns/set", 1)
    exp.delete_expectations("ns/set")
    assert exp.satisfied("ns/set")


def test_expectations_expire(client: redis.Redis) -> None:
    configure({"redis_url": _url(client), **SETTINGS, "expectations_timeout": 0.3})
    exp.expect_creations("ns/slow", 5)
    assert not exp.satisfied("ns/slow")
    wait_until(lambda: exp.satisfied("ns/slow"), timeout=5, what="expectations to expire")


def test_scripts_are_reloaded_when_redis_forgot_them(client: redis.Redis) -> None:
    register_reconciler("machine", lambda key: None)
    assert enqueue("machine", "a") is True
    client.script_flush()  # what a restarted Redis looks like to a long-lived process
    assert enqueue_many([("machine", "a"), ("machine", "b"), ("node", "c")]) == 2, "each counted once"
    client.script_flush()
    assert deliver(client, "machine") == "run"
    assert messages(client, "machine") == 1 and messages(client, "node") == 1


def test_a_bytes_client_works_too(client: redis.Redis) -> None:
    register_reconciler("node", lambda key: None)
    raw = redis.Redis.from_url(_url(client))
    assert enqueue("node", "n", raw) is True
    d = take(client, "node")
    assert process("node", "n", d.id, False, raw) == "run"
