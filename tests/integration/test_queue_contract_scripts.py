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
from informers.sink import send_routing as deliver_routing
from mcm_sandbox.procs import wait_until
from mcm_tasks.queue import Requeue, enqueue, enqueue_after, enqueue_many, register_reconciler, registry
from mcm_tasks.queue import expectations as exp
from mcm_tasks.queue.messages import build_message, new_id, queue_keys
from mcm_tasks.queue.metrics import register_queue_metrics
from mcm_tasks.queue.policy import DUE_GRID
from mcm_tasks.queue.processing import process
from mcm_tasks.queue.producer import enqueue_many_after, publish_due
from mcm_tasks.queue.state import failing, replay, replay_failing
from mcm_tasks.queue.stats import read_stats
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, reset_settings

pytestmark = pytest.mark.integration

#: a visibility timeout short enough to see a lost message's marker go stale
SHORT_VISIBILITY = {"visibility_timeout": 1.0, "worker_lost_timeout": 0.5}
SETTINGS = {
    "reconcile_lock_ttl": 5,
    "visibility_timeout": 60,
    "long_retry": 30,
    "resource_exhausted_retry": 30,
    "class_resync_period": 30,
    "poison_after": 3,
    "error_backoff_base": 0.5,
    "error_backoff_max": 10,
    "expectations_timeout": 30,
}


@dataclass
class Delivery:
    id: str
    key: str
    eta: float | None


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
    return process(kind, d.key, d.id)


def fire(client: redis.Redis, after: float = 45.0) -> int:
    """The publisher, as if ``after`` seconds had passed (less than a marker takes to go stale):
    every key due by then is published."""
    return publish_due(client, time.time() + after)[0]


def due_in(client: redis.Redis, kind: str, key: str) -> float | None:
    score = client.zscore(queue_keys(kind).delayed, key)
    return None if score is None else float(score) - time.time()


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
            # a stray copy for the same key arrives now (e.g. restored from a worker taken for dead)
            mid = new_id()
            client.lpush(queue_keys("machine").broker_list, build_message("machine", key, mid, "mcm.machine"))
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

    recovered: list[str] = []
    register_reconciler("machine", dies)
    registry.register_recovery_hook("machine", recovered.append)
    enqueue("machine", "k")
    d = take(client, "machine")
    with pytest.raises(SystemExit):
        process("machine", "k", d.id)
    assert enqueue("machine", "k") is False, "still locked by the dead run"
    with pytest.raises(SystemExit):
        process("machine", "k", d.id)  # same message redelivered: takes the lock over
    assert client.hget(queue_keys("machine").failures, "k") == "1" and recovered == ["k"]
    [entry] = failing("machine")
    assert (entry.error, entry.count, entry.quarantined) == ("WorkerLost", 1, False)
    with pytest.raises(SystemExit):
        process("machine", "k", d.id)
    # the third death in a row: a poison message, quarantined and retried at long-retry
    assert process("machine", "k", d.id) == "quarantined"
    [entry] = failing("machine")
    assert (entry.kind, entry.key, entry.error, entry.count, entry.quarantined) == (
        "machine", "k", "WorkerLost", 3, True)  # fmt: skip
    assert entry.retry_at == pytest.approx(time.time() + SETTINGS["long_retry"], abs=2)
    assert due_in(client, "machine", "k") == pytest.approx(SETTINGS["long_retry"], abs=2)
    assert enqueue("machine", "k") is False and messages(client, "machine") == 0, "held until its retry"
    assert fire(client, after=5) == 0
    register_reconciler("machine", lambda key: None)
    # long-retry passes
    past = time.time() - 1
    client.hset(queue_keys("machine").locks, "k", f"{past}|{past}|quarantine")
    client.zadd(queue_keys("machine").delayed, {"k": past})
    assert fire(client, after=0) == 1, "the quarantined key comes back at long-retry"
    assert deliver(client, "machine") == "run"
    assert failing() == [] and client.hget(queue_keys("machine").failures, "k") is None
    assert recovered == ["k", "k"], "a quarantine's expired hold is no run that died"


def _expire_lock(client: redis.Redis, kind: str, key: str) -> None:
    """The key's lock expires (no worker alive for longer than --reconcile-lock-ttl)."""
    _, started, holder = str(client.hget(queue_keys(kind).locks, key)).split("|")
    client.hset(queue_keys(kind).locks, key, f"{time.time() - 1}|{started}|{holder}")


def test_a_run_that_never_ended_is_recovered_by_whichever_message_runs_next(client: redis.Redis) -> None:
    def dies(key: str) -> None:
        raise SystemExit("worker killed")

    hooks: list[str] = []
    reports: list[tuple[str, str, str]] = []
    registry.register_recovery_hook("machine", hooks.append)
    registry.register_failure_reporter("machine", lambda *args: reports.append(args) or True)
    register_reconciler("machine", dies)
    enqueue("machine", "k")
    dead = take(client, "machine")
    with pytest.raises(SystemExit):
        process("machine", "k", dead.id)
    _expire_lock(client, "machine", "k")
    calls: list[str] = []
    register_reconciler("machine", recorder(calls))
    assert enqueue("machine", "k") is True, "an expired lock holds nothing back"
    assert deliver(client, "machine") == "run"  # another message (an event) runs before the redelivery
    assert calls == ["k"] and hooks == ["k"]
    assert reports == [("k", "ReconcileFailed", "WorkerLost: the worker died during the reconcile")]
    assert read_stats()[0].retries == 1
    # the dead message's redelivery afterwards runs as any message: its death was reported already
    assert process("machine", "k", dead.id) == "run"
    assert calls == ["k", "k"] and hooks == ["k"] and len(reports) == 1 and read_stats()[0].retries == 1


def test_a_key_that_kills_every_worker_is_quarantined_whichever_message_runs_it(client: redis.Redis) -> None:
    def dies(key: str) -> None:
        raise SystemExit("worker killed")

    register_reconciler("machine", dies)
    for _ in range(SETTINGS["poison_after"]):
        enqueue("machine", "k")
        with pytest.raises(SystemExit):
            deliver(client, "machine")  # each a different message, each after the last lock expired
        _expire_lock(client, "machine", "k")
    enqueue("machine", "k")
    assert deliver(client, "machine") == "quarantined"
    [entry] = failing("machine")
    assert (entry.error, entry.count, entry.quarantined) == ("WorkerLost", 3, True)


def test_replay_lifts_a_quarantine(client: redis.Redis) -> None:
    def dies(key: str) -> None:
        raise SystemExit("worker killed")

    register_reconciler("machine", dies)
    enqueue("machine", "p")
    d = take(client, "machine")
    for _ in range(3):
        with pytest.raises(SystemExit):
            process("machine", "p", d.id)
    assert process("machine", "p", d.id) == "quarantined"
    register_reconciler("machine", lambda key: None)
    assert replay("machine", "p") is True
    assert deliver(client, "machine") == "run" and failing() == []


def test_countdowns_keep_only_the_earliest(client: redis.Redis) -> None:
    calls: list[str] = []
    register_reconciler("machineset", recorder(calls))
    enqueue_after("machineset", "s", 10)
    enqueue_after("machineset", "s", 2)
    enqueue_after("machineset", "s", 5)
    assert messages(client, "machineset") == 0, "a countdown is no message: it waits in Redis"
    assert read_stats()[2].delayed == 1 and due_in(client, "machineset", "s") == pytest.approx(2, abs=0.5)
    assert fire(client, after=0) == 0, "not due yet"
    assert fire(client) == 1 and fire(client) == 0
    assert deliver(client, "machineset") == "run"
    assert calls == ["s"]


def test_a_requeue_replaces_a_countdown_scheduled_before_the_run_began(client: redis.Redis) -> None:
    """A Pending machine's ShortRetry health recheck outlives its join when the earliest due time
    wins: the run that saw the join asks for LongRetry, and its own decision replaces the stale timer
    (a countdown set during the run, on an event the run may not have seen, still wins if earlier)."""
    results = iter([Requeue(30), Requeue(30), Requeue(0)])
    scheduled_during: list[bool] = [False, True, False]

    def reconcile(key: str) -> Requeue | None:
        if scheduled_during.pop(0):
            enqueue_after("machine", key, 2)  # an event's wake-up while the run goes on
        return next(results)

    register_reconciler("machine", reconcile)
    enqueue_after("machine", "m", 2)  # the recheck the Pending machine left
    enqueue("machine", "m")
    assert deliver(client, "machine") == "run"
    assert due_in(client, "machine", "m") == pytest.approx(30, abs=1), "the stale recheck is replaced"
    enqueue("machine", "m")
    assert deliver(client, "machine") == "run"
    assert due_in(client, "machine", "m") == pytest.approx(2, abs=1), "set during the run: the earliest wins"
    enqueue_after("machine", "m", 1)
    enqueue("machine", "m")
    assert deliver(client, "machine") == "run"
    assert due_in(client, "machine", "m") is None and messages(client, "machine") == 1, "at once replaces it"


def test_long_requeues_of_different_keys_come_due_together(client: redis.Redis) -> None:
    """LongRetry rechecks land on policy.DUE_GRID, so one keeper read publishes several."""
    register_reconciler("machine", lambda key: Requeue(600))
    for key in ("a", "b"):
        enqueue("machine", key)
        assert deliver(client, "machine") == "run"
    scores = [client.zscore(queue_keys("machine").delayed, k) for k in ("a", "b")]
    assert all(s is not None and float(s) % DUE_GRID == 0 for s in scores), scores
    assert due_in(client, "machine", "a") == pytest.approx(600, abs=DUE_GRID)


def test_an_event_joining_a_countdown_during_the_run_still_wakes_the_key(client: redis.Redis) -> None:
    """A countdown scheduled before the run (an informer's batched wake) absorbs the batched wake of
    an event that arrives during the run (the earliest wins); the run's later requeue must not
    replace it as stale, or that event, which the run may not have seen, wakes nobody (a MachineSet
    waited LongRetry for a machine change its pass had missed)."""

    event_during: list[bool] = [True, False]

    def reconcile(key: str) -> Requeue | None:
        if event_during.pop(0):
            enqueue_after("machine", key, 3)  # an event's batched wake while the run goes on
        return Requeue(30)

    register_reconciler("machine", reconcile)
    enqueue_after("machine", "m", 2)  # scheduled before the run began
    enqueue("machine", "m")
    assert deliver(client, "machine") == "run"
    assert due_in(client, "machine", "m") == pytest.approx(2, abs=1), "the event's wake-up is kept"
    enqueue_after("machine", "m", 3)  # the same, between runs: the next run will read its state
    enqueue("machine", "m")
    assert deliver(client, "machine") == "run"
    assert due_in(client, "machine", "m") == pytest.approx(30, abs=1), "seen by the run: replaced"


def test_publishers_racing_publish_each_due_key_once(client: redis.Redis) -> None:
    enqueue_many_after([("node", f"n{i}") for i in range(50)], 0.01)
    at = time.time() + 1
    assert publish_due(client, at)[0] + publish_due(client, at)[0] == 50
    assert messages(client, "node") == 50


def test_countdown_firing_while_an_immediate_message_waits_coalesces(client: redis.Redis) -> None:
    register_reconciler("node", lambda key: None)
    enqueue_after("node", "n", 1)
    enqueue("node", "n")
    assert fire(client) == 0, "the waiting message serves both"
    assert deliver(client, "node") == "run"
    assert messages(client, "node") == 0 and read_stats()[6].delayed == 0


def test_a_batch_of_wakeups_is_one_countdown_per_key_and_never_delays_an_earlier_one(
    client: redis.Redis,
) -> None:
    calls: list[str] = []
    register_reconciler("machineset", recorder(calls))
    enqueue_after("machineset", "early", 0.2)
    enqueue_many_after([("machineset", "a"), ("machineset", "b"), ("machineset", "early")], 5)
    enqueue_many_after([("machineset", "a")], 5)  # a later event of the same burst: nothing new
    assert due_in(client, "machineset", "early") == pytest.approx(0.2, abs=0.15)
    assert due_in(client, "machineset", "a") == pytest.approx(5, abs=0.5)
    assert fire(client) == 3
    for _ in range(3):
        assert deliver(client, "machineset") == "run"
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
    assert take(client, "machine").key == "m"
    if period:
        assert messages(client, "machineset") == 0
        wakeup = client.zscore(queue_keys("machineset").delayed, "s")
        assert wakeup is not None and wakeup - sent_at == pytest.approx(period, abs=0.2)
    else:
        assert take(client, "machineset").key == "s"


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
    assert process("machine", "k", old.id) == "duplicate"
    assert deliver(client, "machine") == "run"


def test_errors_back_off_to_the_ceiling_and_keep_retrying(client: redis.Redis) -> None:
    failing_now = {"on": True}

    def reconcile(key: str) -> None:
        if failing_now["on"]:
            raise RuntimeError("cloud said no; password=hunter2")

    register_reconciler("machine", reconcile)
    enqueue("machine", "m")
    for failures in range(1, 8):
        assert deliver(client, "machine") == "run"
        assert client.hget(queue_keys("machine").failures, "m") == str(failures)
        expected = min(SETTINGS["error_backoff_base"] * 2 ** (failures - 1), SETTINGS["error_backoff_max"])
        assert due_in(client, "machine", "m") == pytest.approx(expected, abs=0.3)
        assert fire(client) == 1, "a failing key is always retried"
    [entry] = failing()
    assert entry.count == 7 and entry.error == "RuntimeError" and "hunter2" not in entry.message
    assert entry.since < entry.time and not entry.quarantined
    assert read_stats()[0].retries == 7 and read_stats()[0].failing == 1
    failing_now["on"] = False
    assert deliver(client, "machine") == "run"
    assert failing() == [] and client.hget(queue_keys("machine").failures, "m") is None


def test_replay_of_failing_keys(client: redis.Redis) -> None:
    outcomes = iter([RuntimeError("x"), None])

    def reconcile(key: str) -> None:
        result = next(outcomes)
        if result:
            raise result

    register_reconciler("machine", reconcile)
    enqueue("machine", "m")
    deliver(client, "machine")
    assert [f.key for f in failing("machine")] == ["m"]
    assert replay_failing() == 1
    assert deliver(client, "machine") == "run" and failing() == []
    assert replay("machine", "m") is False, "no longer failing"


def test_a_warning_is_reported_on_the_first_failure_and_every_change_of_error(client: redis.Redis) -> None:
    outcomes = iter(
        [RuntimeError("a"), RuntimeError("a"), ValueError("b token=s3cr3t"), None, RuntimeError("a")]
    )
    reports: list[tuple[str, str, str]] = []

    def reconcile(key: str) -> None:
        result = next(outcomes)
        if result:
            raise result

    register_reconciler("machine", reconcile)
    registry.register_failure_reporter("machine", lambda *args: reports.append(args) or True)
    enqueue("machine", "m")
    deliver(client, "machine")
    for _ in range(3):
        fire(client)
        deliver(client, "machine")
    enqueue("machine", "m")
    deliver(client, "machine")
    assert reports == [
        ("m", "ReconcileFailed", "RuntimeError: a"),
        ("m", "ReconcileFailed", "ValueError: b token=<redacted>"),
        ("m", "ReconcileFailed", "RuntimeError: a"),
    ]


def test_a_warning_that_could_not_be_written_is_written_later_in_the_streak(client: redis.Redis) -> None:
    """An API server refusing every write refuses the Event too: it is owed until written."""
    outcomes = iter([RuntimeError("500"), RuntimeError("500"), None])
    api_up = iter([False, False, True])
    reports: list[str] = []

    def reconcile(key: str) -> None:
        result = next(outcomes)
        if result:
            raise result

    def reporter(key: str, reason: str, message: str) -> bool:
        written = next(api_up)
        if written:
            reports.append(message)
        return written

    register_reconciler("machine", reconcile)
    registry.register_failure_reporter("machine", reporter)
    enqueue("machine", "m")
    deliver(client, "machine")
    assert failing()[0].reported is False
    fire(client)
    deliver(client, "machine")
    fire(client)
    deliver(client, "machine")
    assert reports == ["RuntimeError: 500 (2 failures in a row, then recovered)"]
    assert failing() == []


def test_backoff_is_reset_by_success(client: redis.Redis) -> None:
    outcomes = iter([RuntimeError("x"), None, RuntimeError("y")])

    def reconcile(key: str) -> None:
        result = next(outcomes)
        if result:
            raise result

    register_reconciler("machine", reconcile)
    enqueue("machine", "m")
    deliver(client, "machine")
    fire(client)
    deliver(client, "machine")
    assert client.hget(queue_keys("machine").failures, "m") is None
    enqueue("machine", "m")
    deliver(client, "machine")
    assert client.hget(queue_keys("machine").failures, "m") == "1", "counting starts over"
    assert due_in(client, "machine", "m") == pytest.approx(SETTINGS["error_backoff_base"], abs=0.3)


def test_requeue_after_and_at_once(client: redis.Redis) -> None:
    results = iter([Requeue(3), Requeue(0), None])
    register_reconciler("machineclass", lambda key: next(results))
    enqueue("machineclass", "c")
    deliver(client, "machineclass")
    assert messages(client, "machineclass") == 0
    assert due_in(client, "machineclass", "c") == pytest.approx(3, abs=0.5)
    fire(client)
    deliver(client, "machineclass")
    assert messages(client, "machineclass") == 1, "Requeue(0) goes back at once"
    assert deliver(client, "machineclass") == "run" and messages(client, "machineclass") == 0


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
    assert process("node", "n", d.id, raw) == "run"


def test_expectations_left_open_by_a_pass_that_died_expire_within_the_grace(client: redis.Redis) -> None:
    """A record whose pass never said ``issued`` was left by a pass that died: the owner's next pass
    trusts it for the grace only; a record whose pass issued its writes keeps its timeout."""
    exp.expect_creations("ns/done", 3)
    exp.issued("ns/done", 1)  # one create skipped: it will never be observed
    assert not exp.satisfied_for_pass("ns/done")
    remaining = exp.expires_in("ns/done")
    assert remaining is not None and remaining > 20, "a pass that finished: the timeout holds"
    exp.creation_observed("ns/done", 2)
    assert exp.satisfied_for_pass("ns/done"), "the skipped create is not waited for"

    exp.expect_creations("ns/dead", 3)
    exp.creation_observed("ns/dead")
    assert not exp.satisfied_for_pass("ns/dead")
    remaining = exp.expires_in("ns/dead")
    assert remaining is not None and remaining <= exp.ABANDONED_GRACE
    assert not exp.satisfied_for_pass("ns/dead"), "trusted for the grace: creations made are observed"
    again = exp.expires_in("ns/dead")
    assert again is not None and again <= remaining, "a later pass does not extend the grace"
    wait_until(lambda: exp.satisfied_for_pass("ns/dead"), timeout=5, what="the grace to end")
    assert exp.expires_in("ns/dead") is None

    exp.expect_deletions("ns/deleting", ["a", "b"])
    exp.deletion_observed("ns/deleting", "a")
    assert not exp.satisfied_for_pass("ns/deleting")
    remaining = exp.expires_in("ns/deleting")
    assert remaining is not None and remaining <= exp.ABANDONED_GRACE, "deletions too"
    exp.issued("gone/set")
    assert not client.exists("mcm:exp:gone/set"), "issued never makes a record up"


def test_the_sweep_restores_only_messages_nobody_renewed(client: redis.Redis) -> None:
    from mcm_tasks.queue.keeper import renew, sweep
    from mcm_tasks.settings import get_settings

    settings = get_settings()
    prefix = "mcm:broker:"
    now = time.time()
    for tag, key in (("dead-tag", "lost"), ("live-tag", "held")):
        message = json.loads(build_message("machine", key, f"id-{key}", "mcm.machine"))
        client.hset(prefix + "unacked", tag, json.dumps([message, "mcm.machine", "mcm.machine"]))
        client.zadd(prefix + "unacked_index", {tag: now - 3600})
    # kombu's binding of the queue's exchange (what celery declares)
    client.sadd(prefix + "_kombu.binding.mcm.machine", "mcm.machine\x06\x16\x06\x16mcm.machine")
    renew(client, "w1@host", ["live-tag"], now, settings)
    assert sweep(client, now, settings) == 1
    assert take(client, "machine").key == "lost" and messages(client, "machine") == 0
    assert client.hkeys(prefix + "unacked") == ["live-tag"]
    assert read_stats()[0].recovered == 1
    assert sweep(client, now, settings) == 0, "idempotent"


def test_a_message_lost_in_the_fetch_window_is_published_again(client: redis.Redis) -> None:
    """A worker killed between kombu's BRPOP and its ``unacked`` write loses the message; its
    marker must not coalesce the key's events into nothing until it goes stale."""
    from mcm_tasks.queue.keeper import repair_lost
    from mcm_tasks.settings import get_settings

    settings = get_settings()
    register_reconciler("machine", lambda key: None)
    enqueue_many([("machine", "lost"), ("machine", "queued"), ("machine", "held")])
    pending = queue_keys("machine").pending
    old = time.time() - settings.worker_lost_timeout - 5
    deliveries = {d.key: d for d in (take(client, "machine") for _ in range(3))}
    for d in deliveries.values():
        client.hset(pending, d.key, f"{old}|{d.id}")  # every marker is old now
    queued = deliveries["queued"]
    client.rpush(queue_keys("machine").broker_list,  # back on the queue: slow, not lost
                 build_message("machine", "queued", queued.id, "mcm.machine"))  # fmt: skip
    client.hset("mcm:broker:unacked", f"{deliveries['held'].id}.d", "[]")  # held by a live worker
    assert enqueue("machine", "lost") is False, "the lost message's marker coalesces events"
    assert repair_lost(client, time.time(), settings) == 1
    assert repair_lost(client, time.time(), settings) == 0, "a fresh marker now"
    assert sorted(take(client, "machine").key for _ in range(2)) == ["lost", "queued"]
    assert process("machine", "lost", str(client.hget(pending, "lost")).split("|")[1]) == "run"


class Ahead:
    """A ``registry.ReadAhead`` over plain Redis hashes: what BEGIN read is recorded, not seeded."""

    def __init__(self, plan: Callable[[str], tuple[list[str], list[str]]]) -> None:
        self._plan = plan
        self.seeded: list[tuple[str, list[object]]] = []

    def plan(self, key: str) -> tuple[list[str], list[str]]:
        return self._plan(key)

    def seed(self, key: str, found: list[object]) -> None:
        self.seeded.append((key, list(found)))


def test_begin_reads_ahead_what_the_pass_reads_first(client: redis.Redis) -> None:
    """A kind with a ``ReadAhead``: BEGIN reads the field names of the first hash and one field of
    each further hash, and the pass gets them before its reconciler runs; a field that is not there
    reads as None. A delivery that does not run (busy, duplicate) reads nothing ahead."""
    client.hset("t:synced", mapping={"machines": "1", "nodes": "1"})
    client.hset("t:objects", "ns/a", '{"metadata":{"name":"a"}}')
    seen_by_pass: list[int] = []
    ahead = Ahead(lambda key: (["t:synced", "t:objects", "t:objects"], [key, "ns/none"]))
    registry.register_read_ahead("machine", ahead)
    register_reconciler("machine", lambda key: seen_by_pass.append(len(ahead.seeded)))  # type: ignore[func-returns-value]
    enqueue("machine", "ns/a")
    assert deliver(client, "machine") == "run"
    assert seen_by_pass == [1], "seeded before the reconciler ran"
    ((key, (synced, stored, missing)),) = ahead.seeded
    assert key == "ns/a" and sorted(synced) == ["machines", "nodes"]  # type: ignore[arg-type]
    assert (stored, missing) == ('{"metadata":{"name":"a"}}', None)

    enqueue("machine", "ns/a")
    first = take(client, "machine")
    client.hset(queue_keys("machine").locks, "ns/a", f"{time.time() + 60}|{time.time()}|someone-else")
    assert process("machine", first.key, first.id) == "busy"
    assert len(ahead.seeded) == 1, "nothing read ahead for a delivery that does not run"


def test_a_read_ahead_that_fails_costs_the_pass_nothing_but_its_own_read(client: redis.Redis) -> None:
    """A plan that raises (a garbage key) or a seed that raises is logged and left: the pass runs
    as it would without a read-ahead."""
    calls: list[str] = []
    register_reconciler("machine", recorder(calls))

    def bad_plan(key: str) -> tuple[list[str], list[str]]:
        raise ValueError(f"no plan for {key!r}")

    registry.register_read_ahead("machine", Ahead(bad_plan))
    enqueue("machine", "ns/garbage")
    assert deliver(client, "machine") == "run"

    class BadSeed(Ahead):
        def seed(self, key: str, found: list[object]) -> None:
            raise RuntimeError("cannot seed")

    registry.register_read_ahead("machine", BadSeed(lambda key: (["t:synced"], [])))
    enqueue("machine", "ns/b")
    assert deliver(client, "machine") == "run"
    assert calls == ["ns/garbage", "ns/b"]
