"""Shared reads of the mirror in a real Redis: unchanged objects come back as the same parsed object,
changed ones are parsed again, a list and its synced check come from one instant, and a synced kind
is remembered within one scope (a reconcile), read with every other kind's in one round trip, while
an unsynced one is asked again every time."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import redis

from informers.events import ADDED, DELETED, MODIFIED
from informers.mirror import Mirror
from informers.processor import Relisted, WatchEvent
from mcm_sandbox.testing import fixtures as fx
from mcm_tasks import kinds
from mcm_tasks.cache.listers import Listers, new_listers
from mcm_tasks.cache.reader import CacheReader
from tests.integration.informer_support import Writer

pytestmark = pytest.mark.integration
NS = fx.NS


@pytest.fixture()
def listers(client: redis.Redis) -> Listers:
    return new_listers(NS, CacheReader(client))


def names(objs: Sequence[object]) -> list[str]:
    return sorted(str(o.metadata.name) for o in objs)  # type: ignore[attr-defined]


def test_shared_reads_reuse_unchanged_objects_and_follow_changes(
    client: redis.Redis, listers: Listers
) -> None:
    writer = Writer(client)
    writer.apply(
        Relisted(kinds.MACHINE.mirror, [fx.machine("a", machine_set="s"), fx.machine("b")], "5", initial=True)
    )
    shared = listers.machines.shared
    first = {m.metadata.name: m for m in shared.list()}
    again = {m.metadata.name: m for m in shared.list()}
    assert first["a"] is again["a"] and first["b"] is again["b"]
    assert shared.get("a") is first["a"]
    assert shared.owned_by("uid-s") == [first["a"]] and shared.owned_by("uid-s")[0] is first["a"]
    # the plain lister still parses afresh: its objects are the caller's to change
    assert listers.machines.get("a") is not first["a"]

    writer.apply(
        WatchEvent(kinds.MACHINE.mirror, MODIFIED, fx.machine("a", rv="6", generation=2, machine_set="s"))
    )
    changed = shared.get("a")
    assert changed is not first["a"] and changed.metadata.generation == 2
    assert {m.metadata.name: m for m in shared.list()}["b"] is first["b"]

    writer.apply(WatchEvent(kinds.MACHINE.mirror, DELETED, fx.machine("b", rv="7")))
    assert names(shared.list()) == ["a"]
    assert shared.get("b") is None


def test_list_if_synced_is_none_until_the_kind_is_listed(client: redis.Redis, listers: Listers) -> None:
    writer = Writer(client)
    writer.apply(WatchEvent(kinds.MACHINE.mirror, ADDED, fx.machine("early")))
    assert listers.machines.list_if_synced() is None
    assert listers.machines.shared.list_if_synced() is None
    writer.apply(Relisted(kinds.MACHINE.mirror, [fx.machine("early"), fx.machine("late")], "9", initial=True))
    assert names(listers.machines.list_if_synced() or []) == ["early", "late"]
    assert names(listers.machines.shared.list_if_synced() or []) == ["early", "late"]


def test_a_synced_kind_is_remembered_within_a_scope_an_unsynced_one_never(client: redis.Redis) -> None:
    reader = CacheReader(client)
    with reader.remembering_synced():
        assert not reader.synced(kinds.MACHINE.mirror)
        Writer(client).apply(Relisted(kinds.MACHINE.mirror, [], "3", initial=True))
        assert reader.synced(kinds.MACHINE.mirror), "a no is not remembered"
        Mirror(client).forget_synced()
        assert reader.synced(kinds.MACHINE.mirror), "a yes is remembered in the scope"
    assert not reader.synced(kinds.MACHINE.mirror), "nor after it"
    Writer(client).apply(Relisted(kinds.MACHINE.mirror, [], "4"))
    with reader.remembering_synced():
        assert reader.synced(kinds.MACHINE.mirror)
        Mirror(client).forget_synced()
        # the combined read never relies on the remembered yes
        assert reader.list_stored_if_synced(kinds.MACHINE.mirror) is None
        assert not reader.synced(kinds.MACHINE.mirror)


def _calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}") or {}
    return int(stats.get("calls", 0))


def test_one_read_answers_every_kind_s_synced_question_in_a_scope(client: redis.Redis) -> None:
    for kind in (kinds.MACHINE.mirror, kinds.MACHINE_SET.mirror, kinds.NODE.mirror):
        Writer(client).apply(Relisted(kind, [], "3", initial=True))
    reader = CacheReader(client)
    before = {c: _calls(client, c) for c in ("hkeys", "hexists")}
    with reader.remembering_synced():
        assert not reader.synced(kinds.POD.mirror)
        assert reader.synced(kinds.MACHINE.mirror)
        assert reader.synced(kinds.MACHINE_SET.mirror) and reader.synced(kinds.NODE.mirror)
        assert not reader.synced(kinds.POD.mirror), "asked again: a no is read afresh"
    # one HKEYS answers the first question and every synced kind; one HEXISTS for the second
    # question about the unsynced one
    assert _calls(client, "hkeys") - before["hkeys"] == 1
    assert _calls(client, "hexists") - before["hexists"] == 1


def test_an_object_is_read_from_redis_once_per_scope(client: redis.Redis) -> None:
    """A pass's later reads of one object (its Node from several steps, a secret checked then read)
    get the bytes of its first read, including an absent answer; the next pass reads afresh."""
    writer = Writer(client)
    writer.apply(Relisted(kinds.NODE.mirror, [fx.node("n1")], "3", initial=True))
    listers = new_listers(NS, CacheReader(client))
    before = _calls(client, "hget")
    with listers.nodes.reader.remembering_synced():
        first = listers.nodes.get("n1")
        writer.apply(
            WatchEvent(kinds.NODE.mirror, MODIFIED, fx.node("n1", rv="4", labels={"changed": "yes"}))
        )
        again = listers.nodes.get("n1")
        assert listers.nodes.get("n2") is None
        writer.apply(WatchEvent(kinds.NODE.mirror, ADDED, fx.node("n2")))
        assert listers.nodes.get("n2") is None, "absent stays absent within the pass"
        assert listers.nodes.shared.get("n1") is not None
    assert first == again
    assert _calls(client, "hget") - before == 2  # n1 and n2, once each
    node = listers.nodes.get("n1")
    assert node is not None and node["metadata"]["labels"].get("changed") == "yes", "a new pass reads afresh"
    assert listers.nodes.get("n2") is not None


def test_what_begin_read_ahead_seeds_the_scope_and_costs_no_read(client: redis.Redis) -> None:
    """``CacheReader.seed``: the synced kinds and an object read elsewhere for this pass (the queue
    contract's BEGIN, as strings from a decoding client) answer the pass's questions without a
    command; an object the pass already read keeps its first read; outside a scope nothing is kept."""
    writer = Writer(client)
    writer.apply(Relisted(kinds.NODE.mirror, [fx.node("n1")], "3", initial=True))
    listers = new_listers(NS, CacheReader(client))
    reader = listers.nodes.reader
    seeded = {(kinds.NODE.mirror, "n1"): '{"metadata":{"name":"n1","labels":{"seeded":"yes"}}}'}
    assert not reader.seed([kinds.NODE.mirror], seeded), "no scope: nothing kept"
    before = {c: _calls(client, c) for c in ("hget", "hkeys", "hexists")}
    with reader.remembering_synced():
        assert reader.seed([kinds.NODE.mirror.encode()], {**seeded, (kinds.NODE.mirror, "n2"): None})
        assert reader.synced(kinds.NODE.mirror)
        node = listers.nodes.get("n1")
        assert node is not None and node["metadata"]["labels"] == {"seeded": "yes"}
        assert listers.nodes.get("n2") is None, "seeded as absent"
        assert reader.seed([], {(kinds.NODE.mirror, "n1"): '{"metadata":{"name":"n1"}}'})
        node = listers.nodes.get("n1")
        assert node is not None and node["metadata"]["labels"] == {"seeded": "yes"}, "the first read stays"
    assert {c: _calls(client, c) - before[c] for c in before} == {"hget": 0, "hkeys": 0, "hexists": 0}
