"""Seed mode's shared Redis state with a real redis-server: the registry of served namespaces as
several informer replicas write it (``tenancy_io.publish``), and the keeper's duties over every
namespace's queues (``keeper.publish_due_all``, ``age_all``), each namespace's keys its own."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from mcm_sandbox.procs import wait_until
from mcm_tasks.kinds import QUEUES
from mcm_tasks.queue.keeper import (
    FULL_AGING_EVERY,
    Keeper,
    Wake,
    age_all,
    aging_turn_key,
    publish_due_all,
    repair_and_survey,
    tenant_views,
)
from mcm_tasks.queue.messages import aging_index_key, queue_keys, wake_channel
from mcm_tasks.queue.producer import enqueue_many_after, enqueue_together, scripts_for
from mcm_tasks.settings import Settings, configure, reset_settings
from mcm_tasks.tenancy import serving
from mcm_tasks.tenancy_io import RegistryFollower, entries, generation_key, publish, served

pytestmark = pytest.mark.integration


@pytest.fixture
def seed(redis_url: str) -> Iterator[Settings]:
    yield configure({"redis_url": redis_url, "namespace_selector": "seed=true", "background_aging": "1"})
    reset_settings()


def test_replicas_write_the_registry_each_entry_by_its_owner(
    seed: Settings, redis_client: redis.Redis
) -> None:
    publish(redis_client, seed, {"a": {"since": 1}, "b": {"since": 1}}, mine={"a"})
    publish(redis_client, seed, {"a": {"since": 2}, "b": {"since": 2, "problem": "no Secret"}}, mine={"b"})
    assert entries(redis_client, seed) == {"a": {"since": 1}, "b": {"since": 2, "problem": "no Secret"}}
    publish(redis_client, seed, {"b": {"since": 3}}, mine=set())  # "a" is no longer wanted
    assert served(redis_client, seed) == ["b"]
    assert entries(redis_client, seed) == {"b": {"since": 2, "problem": "no Secret"}}


def test_a_static_list_is_served_as_given(redis_url: str, redis_client: redis.Redis) -> None:
    settings = configure({"redis_url": redis_url, "namespaces": "x,y"})
    try:
        assert served(redis_client, settings) == ["x", "y"]
        assert [v.namespace for v in tenant_views(redis_client, settings)] == ["x", "y"]
    finally:
        reset_settings()


def test_the_keeper_publishes_every_namespaces_due_keys_on_its_own_queue(
    seed: Settings, redis_client: redis.Redis
) -> None:
    publish(redis_client, seed, {"a": {}, "b": {}})
    for namespace in ("a", "b"):
        with serving(namespace, seed):
            enqueue_many_after([("machine", f"{namespace}/m")], 0.01)
    published, _ = publish_due_all(redis_client, time.time() + 1, seed)
    assert published == 2
    for namespace in ("a", "b"):
        with serving(namespace, seed) as view:
            assert redis_client.llen(queue_keys("machine", view).broker_list) == 1
    assert redis_client.llen(queue_keys("machine", seed).broker_list) == 0  # not the installation's


def test_the_keeper_reads_only_the_namespaces_whose_due_time_came(
    seed: Settings, redis_client: redis.Redis
) -> None:
    """With many namespaces, a wake-up for one of them reads its delayed sets alone: reading every
    namespace's at every wake-up grew with the square of the namespaces in a seed's scale-up."""
    publish(redis_client, seed, {ns: {} for ns in ("a", "b", "c")})
    keeper = Keeper("w1", seed)
    wake = Wake(redis_client, wake_channel(seed))
    try:
        assert wake.wait(0.2, keeper._stop_event) == {}  # the subscription confirmed
        now = time.time()
        assert keeper.publish_due(redis_client, now) == (0, float("inf"))
        assert keeper.views_read == 3  # none known yet: each read once
        assert keeper.publish_due(redis_client, now) == (0, float("inf"))
        assert keeper.views_read == 3  # nothing waits anywhere: nothing read
        with serving("b", seed) as view:
            enqueue_many_after([("machine", "b/m")], 0.05)
            heard = wake.wait(2.0, keeper._stop_event)
            assert list(heard) == [view.key_prefix]  # the message names b's set
        keeper.due_at[view.key_prefix] = min(heard.values())
        later = time.time() + 1
        assert keeper.publish_due(redis_client, later) == (1, float("inf"))
        assert keeper.views_read == 4  # b alone
        assert redis_client.llen(queue_keys("machine", view).broker_list) == 1
    finally:
        wake.close()


def test_aging_promotes_each_namespaces_background_work_once_per_turn(
    seed: Settings, redis_client: redis.Redis
) -> None:
    publish(redis_client, seed, {"a": {}, "b": {}})
    for namespace in ("a", "b"):
        with serving(namespace, seed):
            enqueue_together([("machine", f"{namespace}/m")], (), 0.0, background=True)
    assert age_all(redis_client, "w1", time.time(), 0.5, seed) == 0  # younger than the aging
    wait_until(lambda: not redis_client.exists(aging_turn_key(seed)), 2, what="the first turn to end")
    assert age_all(redis_client, "w1", time.time() + 1, 0.5, seed) == 2
    assert age_all(redis_client, "w2", time.time() + 1, 0.5, seed) == 0  # not this keeper's turn
    with serving("a", seed) as view:
        keys = queue_keys("machine", view)
        assert redis_client.llen(keys.broker_list) == 1 and redis_client.llen(keys.background_list) == 0


def test_an_aging_turn_looks_only_at_the_queues_with_background_work(
    seed: Settings, redis_client: redis.Redis
) -> None:
    """The aging index: a background message's queue joins it, a drained one leaves it, a turn
    with nothing indexed runs no script (a seed at rest ran one per kind and namespace per turn),
    and one turn of the fleet a minute looks at every queue."""
    publish(redis_client, seed, {"a": {}, "b": {}})
    index = aging_index_key(seed)
    with serving("a", seed) as view:
        enqueue_together([("machine", "a/m")], (), 0.0, background=True)
        aging = queue_keys("machine", view).aging
    assert redis_client.smembers(index) == {aging}

    def evalsha_calls() -> int:
        return int(redis_client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

    def next_turn() -> None:
        wait_until(lambda: not redis_client.exists(aging_turn_key(seed)), 2, what="the turn to end")

    minute = (time.time() // FULL_AGING_EVERY) * FULL_AGING_EVERY
    before = evalsha_calls()
    assert age_all(redis_client, "w1", minute, 0.5, seed) == 0  # full, and the message is young
    assert evalsha_calls() - before >= 2 * len(QUEUES)  # every queue of both namespaces
    assert redis_client.smembers(index) == {aging}
    next_turn()
    before = evalsha_calls()
    assert age_all(redis_client, "w1", minute + 100.25, 0.5, seed) == 1  # a's machine queue alone
    assert evalsha_calls() - before == 1
    assert redis_client.smembers(index) == set()  # drained: it left the index
    next_turn()
    before = evalsha_calls()
    assert age_all(redis_client, "w1", minute + 110.25, 0.5, seed) == 0
    assert evalsha_calls() == before  # nothing indexed: no script


def test_a_repair_turn_over_fifty_resting_namespaces_is_one_script_call(
    seed: Settings, redis_client: redis.Redis
) -> None:
    """The repair turn surveys every namespace's queues in one call and searches only those holding
    markers: a seed at rest ran a ghost search per queue and a due read per namespace (350 script
    calls a turn with fifty). The survey also gives each namespace's first due time (the backstop)."""
    namespaces = [f"ns-{i:02d}" for i in range(50)]
    publish(redis_client, seed, {ns: {} for ns in namespaces})
    views = tenant_views(redis_client, seed)
    with serving("ns-07", seed):
        enqueue_many_after([("machineset", "ns-07/s")], 30)

    def evalsha_calls() -> int:
        return int(redis_client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

    repair_and_survey(redis_client, time.time(), views)  # the script loaded (a first EVALSHA fails)
    before = evalsha_calls()
    repaired, firsts = repair_and_survey(redis_client, time.time(), views)
    assert (repaired, evalsha_calls() - before) == (0, 1)
    due = {view.namespace: first for view, first in zip(views, firsts, strict=True)}
    assert due.pop("ns-07") == pytest.approx(time.time() + 30, abs=5)
    assert set(due.values()) == {None}

    # a marker whose message was lost (older than worker_lost_timeout, neither queued nor held)
    with serving("ns-31", seed) as view:
        old = time.time() - seed.worker_lost_timeout - 5
        redis_client.hset(queue_keys("machine", view).pending, "ns-31/m", f"{old}|lost-id")
        for script in (scripts_for("machine", view).ghosts, scripts_for("machine", view).repair):
            redis_client.script_load(script.source)
        before = evalsha_calls()
        repaired, _ = repair_and_survey(redis_client, time.time(), views)
        assert (repaired, evalsha_calls() - before) == (1, 3)  # the survey, one search, the repair
        assert redis_client.llen(queue_keys("machine", view).broker_list) == 1


def test_a_due_key_whose_wake_was_missed_is_published_at_the_next_repair_turn(
    seed: Settings, redis_client: redis.Redis
) -> None:
    """The backstop: a due time the keepers never heard of (the wake message lost) is found by the
    repair turn's survey and published."""
    publish(redis_client, seed, {"a": {}, "b": {}})
    keeper = Keeper("w1", seed.model_copy(update={"worker_lost_timeout": 2.0}))
    keeper.start()
    try:
        wait_until(lambda: keeper.repairs >= 1, timeout=10, interval=0.02, what="the first repair turn")
        with serving("b", seed) as view:
            keys = queue_keys("machine", view)
        redis_client.zadd(keys.delayed, {"b/m": time.time()})  # due now; no wake message
        wait_until(lambda: redis_client.llen(keys.broker_list) == 1, timeout=10, interval=0.05,
                   what="b/m published by the backstop")  # fmt: skip
    finally:
        keeper.stop()


def test_a_follower_reads_the_registry_again_only_when_it_was_published(
    seed: Settings, redis_client: redis.Redis
) -> None:
    """Every publish moves the registry's generation on; a worker's seed-queues thread reads the
    fifty entries only then (it read and parsed them every --seed-refresh-period)."""
    follower = RegistryFollower()
    assert follower.read(redis_client, seed) == {} and follower.reads == 1  # no generation kept yet
    assert follower.read(redis_client, seed) == {} and follower.reads == 2
    publish(redis_client, seed, {"a": {"since": 1}})
    assert follower.read(redis_client, seed) == {"a": {"since": 1}}
    reads = follower.reads
    for _ in range(5):
        assert follower.read(redis_client, seed) == {"a": {"since": 1}}
    assert follower.reads == reads
    publish(redis_client, seed, {"a": {"since": 1}, "b": {"since": 2}}, mine={"b"})
    assert follower.read(redis_client, seed) == {"a": {"since": 1}, "b": {"since": 2}}
    assert follower.reads == reads + 1
    redis_client.delete(generation_key(seed))  # a Redis that lost it: read every time again
    follower.read(redis_client, seed)
    follower.read(redis_client, seed)
    assert follower.reads == reads + 3
