"""The mirror in a real Redis, read back through the listers tasks use: objects and index entries
move together, vanished objects leave no index entry behind, secrets keep data only while referenced."""

from __future__ import annotations

import pytest
import redis

from informers.events import ADDED, DELETED, MODIFIED
from informers.processor import Relisted, WatchEvent
from mcm_sandbox.testing import fixtures as fx
from mcm_tasks import kinds
from mcm_tasks.api import Machine
from mcm_tasks.cache import layout
from mcm_tasks.cache.listers import Listers, new_listers
from mcm_tasks.cache.reader import CacheReader
from tests.integration.informer_support import Writer

pytestmark = pytest.mark.integration
NS = fx.NS


@pytest.fixture()
def writer(client: redis.Redis) -> Writer:
    return Writer(client)


@pytest.fixture()
def listers(client: redis.Redis) -> Listers:
    return new_listers(NS, CacheReader(client))


def test_machines_are_readable_as_models_and_through_every_index(writer: Writer, listers: Listers) -> None:
    writer.apply(
        WatchEvent(
            kinds.MACHINE.mirror, ADDED, fx.machine("a", machine_set="s", node="n1", labels={"name": "d"})
        ),
        WatchEvent(kinds.MACHINE.mirror, ADDED, fx.machine("b", machine_set="s", cls="other")),
    )
    got = listers.machines.get("a")
    assert isinstance(got, Machine) and got.metadata.name == "a"
    assert sorted(str(m.metadata.name) for m in listers.machines.owned_by("uid-s")) == ["a", "b"]
    assert [m.metadata.name for m in listers.machines.of_class("other")] == ["b"]
    assert [m.metadata.name for m in listers.machines.on_node("n1")] == ["a"]
    assert [m.metadata.name for m in listers.machines.with_deployment_name("d")] == ["a"]
    assert listers.machines.raw.get("a")["metadata"]["labels"]["node"] == "n1"
    assert sorted(listers.machines.keys()) == [f"{NS}/a", f"{NS}/b"]


def test_an_object_and_its_index_entries_change_together(
    writer: Writer, listers: Listers, client: redis.Redis
) -> None:
    writer.apply(WatchEvent(kinds.POD.mirror, ADDED, fx.pod("p", node_name="n1")))
    writer.apply(WatchEvent(kinds.POD.mirror, MODIFIED, fx.pod("p", node_name="n2", rv="2")))
    assert listers.pods.on_node("n1") == []
    assert [p["metadata"]["name"] for p in listers.pods.on_node("n2")] == ["p"]
    writer.apply(WatchEvent(kinds.POD.mirror, DELETED, fx.pod("p", node_name="n2", rv="3")))
    assert listers.pods.get("p", "default") is None
    assert listers.pods.on_node("n2") == []
    assert client.keys(layout.index_pattern(kinds.POD.mirror)) == [], "no empty index sets are left behind"


def test_relist_removes_what_vanished_while_the_watch_was_down(writer: Writer, listers: Listers) -> None:
    writer.apply(
        *(
            WatchEvent(
                kinds.NODE.mirror,
                ADDED,
                fx.node(f"n{i}", labels={"node.gardener.cloud/machine-name": f"m{i}"}),
            )
            for i in range(3)
        )
    )
    writer.apply(
        Relisted(kinds.NODE.mirror, [fx.node("n0", labels={"node.gardener.cloud/machine-name": "m0"})], "9")
    )
    assert listers.nodes.keys() == ["n0"]
    assert listers.nodes.for_machine("m1") == []
    assert [n["metadata"]["name"] for n in listers.nodes.for_machine("m0")] == ["n0"]
    assert listers.nodes.synced()
    assert not listers.machines.synced()


def test_large_batches_are_written_in_chunks_completely(writer: Writer, listers: Listers) -> None:
    pods = [fx.pod(f"p{i}", node_name=f"n{i % 7}") for i in range(1234)]
    writer.apply(Relisted(kinds.POD.mirror, pods, "5", initial=True))
    assert listers.pods.reader.count(kinds.POD.mirror) == 1234
    assert len(listers.pods.on_node("n3")) == len([p for p in pods if p["spec"]["nodeName"] == "n3"])


def test_secret_data_never_reaches_redis(writer: Writer, listers: Listers, client: redis.Redis) -> None:
    writer.apply(WatchEvent(kinds.SECRET.mirror, ADDED, fx.secret("s", data={"userData": "aGVsbG8="})))
    writer.apply(WatchEvent(kinds.MACHINE_CLASS.mirror, ADDED, fx.machine_class("c", secret="s")))
    assert [c.metadata.name for c in listers.machine_classes.referencing_secret(f"{NS}/s")] == ["c"]
    digest = listers.secrets.data_digest("s")
    assert digest and digest.startswith("hmac-sha256:")
    assert "data" not in (listers.secrets.get("s") or {})
    writer.apply(
        WatchEvent(kinds.SECRET.mirror, MODIFIED, fx.secret("s", rv="2", data={"userData": "d29ybGQ="}))
    )
    assert listers.secrets.data_digest("s") not in (None, digest)
    dump = b"".join(client.dump(k) or b"" for k in client.keys("*"))
    assert b"aGVsbG8=" not in dump and b"d29ybGQ=" not in dump
    assert listers.secrets.data_digest("absent") is None


def test_the_sentinel_reports_what_redis_holds(writer: Writer, client: redis.Redis) -> None:
    from informers.mirror import Commit

    assert writer.mirror.write(Commit()) is None
    assert writer.mirror.write(Commit(sentinel="epoch-1")) == "epoch-1"
    client.flushall()
    assert writer.mirror.write(Commit()) is None


def test_writes_lost_under_a_surviving_sentinel_are_reported_as_a_loss(
    writer: Writer, client: redis.Redis
) -> None:
    """A promoted replica that missed the master's last writes still has the sentinel: the commit
    count, behind this writer's, tells the loss."""
    from informers.mirror import Commit

    assert writer.mirror.write(Commit(sentinel="epoch-1")) == "epoch-1"
    assert writer.mirror.write(Commit()) == "epoch-1"
    client.decr(layout.sentinel_key() + ":commits")  # the last commit never reached the replica
    assert writer.mirror.write(Commit()) is None
    assert writer.mirror.write(Commit()) == "epoch-1"  # counted from there on


def test_a_new_leader_seeds_its_memory_from_the_mirror(
    writer: Writer, client: redis.Redis, listers: Listers
) -> None:
    writer.apply(
        WatchEvent(kinds.POD.mirror, ADDED, fx.pod("gone", node_name="n")),
        WatchEvent(kinds.POD.mirror, ADDED, fx.pod("kept", node_name="n")),
    )
    successor = Writer(client)
    assert successor.processor.seed(kinds.POD.mirror, successor.mirror.scan(kinds.POD.mirror)) == 2
    successor.apply(Relisted(kinds.POD.mirror, [fx.pod("kept", node_name="n")], "7", initial=True))
    assert [p["metadata"]["name"] for p in listers.pods.on_node("n")] == ["kept"]


def test_the_bench_hook_mirrors_each_synthetic_event_and_routes_it_to_the_machine_queue(
    client: redis.Redis,
) -> None:
    from informers.sink import ListSink
    from mcm_sandbox.testing.bench_hook import mirror_and_enqueue

    sink = ListSink(client)
    reader = CacheReader(client)
    assert mirror_and_enqueue(client, [("machine", "m1"), ("machine", "m2"), ("node", "n1")], sink) == 3
    first = reader.get(kinds.MACHINE.mirror, "m1")
    assert first is not None and first["metadata"]["generation"] == 1
    mirror_and_enqueue(client, [("machine", "m1")], sink)
    assert reader.get(kinds.MACHINE.mirror, "m1")["metadata"]["generation"] == 2  # type: ignore[index]
    assert [i.decode() for i in client.lrange(sink.key, 0, -1)] == [  # type: ignore[union-attr]
        "machine m1",
        "machine m2",
        "node n1",
        "machine m1",
    ]
