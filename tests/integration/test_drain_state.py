"""The drain's progress in a real Redis: one hash per machine, replaced atomically, owned by one uid,
expiring on its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from mcm_tasks.controllers.machine.drain.state_io import (
    DrainProgress,
    DrainStore,
    PodProgress,
    drain_key,
    state_ttl,
)
from mcm_tasks.settings import configure, reset_settings

pytestmark = pytest.mark.integration
KEY = "default/m1"


@pytest.fixture()
def store(redis_client: redis.Redis, redis_url: str) -> Iterator[DrainStore]:
    configure({"redis_url": redis_url, "key_prefix": "t"})
    yield DrainStore(redis_client)
    reset_settings()


def progress(**pods: PodProgress) -> DrainProgress:
    return DrainProgress(machine_uid="uid-1", node="n1", started_at=5.0, pods=pods)


def test_round_trip_as_one_hash_field_per_pod(store: DrainStore, redis_client: redis.Redis) -> None:
    saved = progress(**{"ns/a": PodProgress(uid="a", attempts=3), "ns/b": PodProgress(uid="b", volumes=True)})
    store.save(KEY, saved, 60)
    assert sorted(redis_client.hkeys(drain_key(KEY))) == ["meta", "pod:ns/a", "pod:ns/b"]
    assert drain_key(KEY) == "t:drain:default/m1"
    assert store.load(KEY, "uid-1") == saved


def test_save_replaces_pods_no_longer_tracked(store: DrainStore, redis_client: redis.Redis) -> None:
    store.save(KEY, progress(**{"ns/a": PodProgress(uid="a"), "ns/b": PodProgress(uid="b")}), 60)
    store.save(KEY, progress(**{"ns/b": PodProgress(uid="b", done=True)}), 60)
    loaded = store.load(KEY, "uid-1")
    assert loaded is not None
    assert list(loaded.pods) == ["ns/b"]
    assert loaded.pods["ns/b"].done


def test_a_namesake_machine_does_not_inherit_progress(store: DrainStore) -> None:
    store.save(KEY, progress(), 60)
    assert store.load(KEY, "uid-2") is None
    assert store.load(KEY, "uid-1") is not None


def test_missing_and_cleared(store: DrainStore) -> None:
    assert store.load(KEY, "uid-1") is None
    store.save(KEY, progress(), 60)
    store.clear(KEY)
    assert store.load(KEY, "uid-1") is None


def test_expiry_is_armed_on_every_save(store: DrainStore, redis_client: redis.Redis) -> None:
    store.save(KEY, progress(), 100)
    assert 0 < redis_client.ttl(drain_key(KEY)) <= 100
    store.save(KEY, progress(), 5000)
    assert redis_client.ttl(drain_key(KEY)) > 100
    assert state_ttl(60) > 60


def _calls(client: redis.Redis, *commands: str) -> dict[str, int]:
    stats = client.info("commandstats")
    return {c: int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in commands}


def test_a_store_asks_redis_nothing_it_already_knows(store: DrainStore, redis_client: redis.Redis) -> None:
    """A store that cleared a key, or found it empty, loads it as None and clears it as nothing without
    a round trip until it saves it again: the deletion flow keeps one store per pass, and only its
    machine's passes write the key. A machine with nothing to drain costs one DEL, not 3 DELs and a
    HGETALL."""
    store.save(KEY, progress(), 60)
    before = _calls(redis_client, "del", "hgetall")
    store.clear(KEY)
    assert store.load(KEY, "uid-1") is None
    store.clear(KEY)
    assert _calls(redis_client, "del", "hgetall") == {"del": before["del"] + 1, "hgetall": before["hgetall"]}

    store.save(KEY, progress(), 60)
    assert store.load(KEY, "uid-1") is not None, "after its own save, the store reads again"
    assert redis_client.exists(drain_key(KEY))

    other = "default/m2"
    assert store.load(other, "uid-1") is None
    before = _calls(redis_client, "del", "hgetall")
    assert store.load(other, "uid-1") is None
    store.clear(other)
    assert _calls(redis_client, "del", "hgetall") == before, "found empty: nothing to ask or delete"
    assert DrainStore(redis_client).load(KEY, "uid-1") is not None, "another store knows nothing"
