"""The mirror's versions of a kind (``layout.VERSIONED_KINDS``), in a real Redis: a list through the
parsed-object cache reads the versions and fetches only the objects changed since this process
parsed them; a versions hash that a reader cannot trust (no epoch of the current sentinel, entries
not matching the objects: a mirror an older informer wrote) and an object gone between the two reads
send the reader to the whole list; a new leader rebuilds the hash from what it finds mirrored."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from informers.events import ADDED, DELETED, MODIFIED
from informers.mirror import Commit, Mirror, encode
from informers.processor import Processor, Relisted, WatchEvent
from informers.resources import BY_KIND
from informers.runner import Informer
from informers.sink import MemorySink
from informers.store import Store
from mcm_sandbox.testing import fixtures as fx
from mcm_tasks import kinds
from mcm_tasks.cache import layout, models
from mcm_tasks.cache.listers import Listers, new_listers
from mcm_tasks.cache.reader import UNKEPT, CacheReader
from mcm_tasks.seed_queues import forget_namespaces
from mcm_tasks.settings import Settings, get_settings
from mcm_tasks.tenancy import queue_names, serving
from tests.integration.informer_support import Writer

pytestmark = pytest.mark.integration
NS = fx.NS
MACHINES = kinds.MACHINE.mirror


@pytest.fixture(autouse=True)
def fresh_parsed_cache() -> Iterator[None]:
    """This process's parsed-object cache, empty: what another test parsed is no hit here."""
    models._caches.clear()
    yield
    models._caches.clear()


class Fetches:
    """The keys a lister fetched by key (``get_many_stored``), call by call."""

    def __init__(self, reader: CacheReader) -> None:
        self.calls: list[list[str]] = []
        inner = reader.get_many_stored

        def counting(kind: str, keys: Any) -> list[tuple[str, bytes]]:
            wanted = list(keys)
            self.calls.append(sorted(wanted))
            return inner(kind, wanted)

        reader.get_many_stored = counting  # type: ignore[method-assign]


def _listers(client: redis.Redis) -> tuple[Listers, Fetches]:
    reader = CacheReader(client)
    return new_listers(NS, reader), Fetches(reader)


def _leading(client: redis.Redis, writer: Writer, *machines: dict[str, Any]) -> None:
    """The machines listed, then the sentinel a leader sets once everything is listed."""
    writer.apply(Relisted(MACHINES, list(machines), "5", initial=True))
    Mirror(client).write(Commit(sentinel="leader-1:epoch"))


def stored(name: str, rv: str) -> bytes:
    """A machine as the informer stores it (its ``stored`` projection, encoded)."""
    return encode(BY_KIND[MACHINES].stored(fx.machine(name, rv=rv)))


def versions_of(reader: CacheReader) -> Any:
    """The reader's versions of the machines, decoded (or what it answered instead)."""
    found = reader.versions_if_synced(MACHINES)
    return {k.decode(): v.decode() for k, v in found.items()} if isinstance(found, dict) else found


def names(objs: list[Any] | None) -> list[str]:
    return sorted(str(o.metadata.name) for o in objs or [])


def test_a_list_by_version_fetches_only_what_changed(client: redis.Redis) -> None:
    writer = Writer(client)
    _leading(client, writer, fx.machine("a", rv="11"), fx.machine("b", rv="12"), fx.machine("c", rv="13"))
    listers, fetches = _listers(client)
    shared = listers.machines.shared
    assert versions_of(listers.machines.reader) == {
        f"{NS}/a": "11",
        f"{NS}/b": "12",
        f"{NS}/c": "13",
    }
    first = {m.metadata.name: m for m in shared.list_if_synced() or []}
    assert sorted(first) == ["a", "b", "c"]
    assert fetches.calls == [[f"{NS}/a", f"{NS}/b", f"{NS}/c"]], "a fresh process parses them all"

    again = {m.metadata.name: m for m in shared.list_if_synced() or []}
    assert all(again[n] is first[n] for n in first)
    assert fetches.calls[1:] == [], "nothing changed: no object read"

    writer.apply(WatchEvent(MACHINES, MODIFIED, fx.machine("b", rv="20", phase="Running")))
    writer.apply(WatchEvent(MACHINES, DELETED, fx.machine("c", rv="21")))
    third = {m.metadata.name: m for m in shared.list_if_synced() or []}
    assert sorted(third) == ["a", "b"]
    assert third["a"] is first["a"] and third["b"] is not first["b"]
    assert third["b"].metadata.resource_version == "20"
    assert third["b"].status.current_status.phase == "Running"
    assert fetches.calls[1:] == [[f"{NS}/b"]]


def test_versions_a_reader_cannot_trust_send_it_to_the_whole_list(client: redis.Redis) -> None:
    writer = Writer(client)
    writer.apply(Relisted(MACHINES, [fx.machine("a", rv="11")], "5", initial=True))
    listers, fetches = _listers(client)
    reader = listers.machines.reader
    assert reader.versions_if_synced(MACHINES) is UNKEPT, "no leader marked the hash yet"
    assert names(listers.machines.shared.list_if_synced()) == ["a"]

    Mirror(client).write(Commit(sentinel="leader-1:epoch"))
    assert versions_of(reader) == {f"{NS}/a": "11"}
    # an informer that keeps no versions (an older release after a rollback) writes an object alone
    client.hset(layout.objects_key(MACHINES), f"{NS}/x", stored("x", rv="30"))
    assert reader.versions_if_synced(MACHINES) is UNKEPT
    assert names(listers.machines.shared.list_if_synced()) == ["a", "x"]
    client.hdel(layout.objects_key(MACHINES), f"{NS}/x")
    assert versions_of(reader) == {f"{NS}/a": "11"}
    # and once it leads, its own sentinel: the hash's epoch is an earlier leader's
    client.set(layout.sentinel_key(), "old-release:epoch")
    assert reader.versions_if_synced(MACHINES) is UNKEPT
    assert fetches.calls == [], "the whole lists read no object by key"
    # not synced is said as before
    Mirror(client).forget_synced()
    assert reader.versions_if_synced(MACHINES) is None
    assert listers.machines.shared.list_if_synced() is None


def test_an_object_gone_between_the_two_reads_sends_the_reader_to_the_whole_list(
    client: redis.Redis,
) -> None:
    writer = Writer(client)
    _leading(client, writer, fx.machine("a", rv="11"), fx.machine("b", rv="12"))
    listers, _ = _listers(client)
    reader = listers.machines.reader
    inner = reader.get_many_stored

    def deleted_meanwhile(kind: str, keys: Any) -> list[tuple[str, bytes]]:
        writer.apply(WatchEvent(MACHINES, DELETED, fx.machine("b", rv="13")))
        return inner(kind, keys)

    reader.get_many_stored = deleted_meanwhile  # type: ignore[method-assign]
    assert names(listers.machines.shared.list_if_synced()) == ["a"]


def test_an_unreadable_object_is_left_out_of_a_list_by_version(client: redis.Redis) -> None:
    writer = Writer(client)
    bad = fx.machine("bad", rv="12")
    bad["spec"]["class"] = "not-a-reference"
    _leading(client, writer, fx.machine("a", rv="11"), bad)
    listers, _ = _listers(client)
    assert names(listers.machines.shared.list_if_synced()) == ["a"]
    assert names(listers.machines.shared.list_if_synced()) == ["a"]


def test_a_new_leader_rebuilds_the_versions_from_what_it_finds(client: redis.Redis) -> None:
    writer = Writer(client)
    _leading(client, writer, fx.machine("a", rv="11"), fx.machine("b", rv="12"))
    versions = layout.versions_key(MACHINES)
    # what an older release left: an object rewritten without its version, one never versioned
    client.hset(layout.objects_key(MACHINES), f"{NS}/a", stored("a", rv="40"))
    client.hdel(versions, f"{NS}/b")
    client.hset(versions, f"{NS}/gone", "3")
    informer = Informer(Settings(namespace=NS), {}, client, MemorySink())
    assert informer._seed(Processor(Store(NS)), MACHINES) == 2
    assert client.hgetall(versions) == {f"{NS}/a".encode(): b"40", f"{NS}/b".encode(): b"12"}
    reader = CacheReader(client)
    assert reader.versions_if_synced(MACHINES) is UNKEPT, "trusted only under the new leader's sentinel"
    Mirror(client).write(Commit(sentinel="leader-2:epoch"))
    assert versions_of(reader) == {f"{NS}/a": "40", f"{NS}/b": "12"}


def test_a_list_by_version_keeps_what_it_parsed_when_another_list_drops_it(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pool threads list the same machines from versions read at two instants: the list that
    read them before ``x`` was created drops ``x`` from the process's table as gone, right after
    the other list parsed it. The later list still holds ``x``: it takes each object as it parsed
    it, not as the table holds it afterwards (a set that lost a machine so created one too many)."""
    writer = Writer(client)
    _leading(client, writer, fx.machine("a", rv="11"))
    listers, _ = _listers(client)
    shared = listers.machines.shared
    assert names(shared.list_if_synced()) == ["a"]
    earlier = shared.reader.versions_if_synced(MACHINES)
    assert isinstance(earlier, dict)
    writer.apply(WatchEvent(MACHINES, ADDED, fx.machine("x", rv="12")))
    cache = models.get_parsed_cache()
    one = cache.one

    def parsed_then_dropped(kind: str, parse: Any, key: str, raw: bytes) -> Any:
        obj = one(kind, parse, key, raw)
        if key == f"{NS}/x":
            monkeypatch.setattr(cache, "one", one)
            cache.every_versioned(kind, parse, earlier, lambda keys: [])  # the other thread's list
        return obj

    monkeypatch.setattr(cache, "one", parsed_then_dropped)
    assert names(shared.list_if_synced()) == ["a", "x"]


def test_each_namespace_of_a_seed_keeps_its_own_parsed_machines(client: redis.Redis) -> None:
    """A seed's worker lists every namespace's machines through one process cache: listing one
    namespace must not drop another's parsed machines as gone (each set pass would parse its
    machines afresh, and a list by version beside it could lose one)."""
    for tenant, machines in (("ns-a", ("a1", "a2")), ("ns-b", ("b1", "b2"))):
        with serving(tenant):
            _leading(client, Writer(client), *(fx.machine(name, rv="11") for name in machines))
    listers, fetches = _listers(client)
    shared = listers.machines.shared
    with serving("ns-a"):
        first = {m.metadata.name: m for m in shared.list_if_synced() or []}
    with serving("ns-b"):
        assert names(shared.list_if_synced()) == ["b1", "b2"]
    with serving("ns-a"):
        again = {m.metadata.name: m for m in shared.list_if_synced() or []}
    assert sorted(again) == ["a1", "a2"] and all(again[n] is first[n] for n in first)
    assert fetches.calls == [[f"{NS}/a1", f"{NS}/a2"], [f"{NS}/b1", f"{NS}/b2"]], "ns-a parsed once"


def test_a_namespace_the_seed_no_longer_serves_leaves_no_parsed_machine(client: redis.Redis) -> None:
    """A worker that stops consuming a namespace's queues (removed from the seed) drops what it
    parsed of that namespace's mirror; the other namespaces' parsed machines stay."""
    for tenant, machines in (("ns-a", ("a1", "a2")), ("ns-b", ("b1", "b2"))):
        with serving(tenant):
            _leading(client, Writer(client), *(fx.machine(name, rv="11") for name in machines))
    listers, fetches = _listers(client)
    shared = listers.machines.shared
    cache = models.get_parsed_cache()
    sizes: dict[str, int] = {}
    for tenant in ("ns-a", "ns-b"):
        with serving(tenant):
            assert len(shared.list_if_synced() or []) == 2
    settings = get_settings()
    assert forget_namespaces(settings, queue_names(settings, ["ns-a"], ["machine", "machineset"])) == {"ns-a"}
    for tenant in ("ns-a", "ns-b"):
        with serving(tenant):
            sizes[tenant] = cache.size(shared.table, shared.parse)
    assert sizes == {"ns-a": 0, "ns-b": 2}
    with serving("ns-b"):
        assert names(shared.list_if_synced()) == ["b1", "b2"]
    assert len(fetches.calls) == 2, "ns-b's machines were still parsed"
