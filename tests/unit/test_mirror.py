"""What the single writer decides to write: stored forms, index moves, secrets without their data,
and the bookkeeping of a re-list (vanished objects deleted and routed, initial lists announced)."""

from __future__ import annotations

from typing import Any, cast

import orjson

from informers.events import ADDED, DELETED, MODIFIED
from informers.mirror import Change, Commit
from informers.processor import Outcome, Processor, Relisted, WatchEvent
from informers.store import Store
from mcm_sandbox.testing import fixtures as fx
from mcm_tasks import kinds
from mcm_tasks.cache import layout

NS = fx.NS


def changes_of(out: Outcome, kind: str) -> dict[str, Change]:
    return {c.key: c for c in out.commit.changes if c.kind == kind}


def stored(change: Change) -> dict[str, Any]:
    assert change.stored is not None
    return cast(dict[str, Any], orjson.loads(change.stored))


def test_pods_are_stored_as_a_projection_and_remembered_smaller_still() -> None:
    proc = Processor(Store(NS))
    out = proc.process([WatchEvent(kinds.POD.mirror, ADDED, fx.pod("p", node_name="n1"))])
    pod = stored(changes_of(out, kinds.POD.mirror)["default/p"])
    assert set(pod) == {"metadata", "spec", "status"}
    assert set(pod["spec"]) == {"nodeName", "volumes", "priority", "terminationGracePeriodSeconds"}
    assert set(pod["status"]) == {"phase", "conditions"}
    assert "managedFields" not in pod["metadata"]
    remembered = proc.store.get(kinds.POD.mirror, "default/p")
    assert remembered == {
        "metadata": {"name": "p", "namespace": "default", "resourceVersion": "1"},
        "spec": {"nodeName": "n1"},
    }


def test_nodes_are_stored_without_images() -> None:
    out = Processor(Store(NS)).process([WatchEvent(kinds.NODE.mirror, ADDED, fx.node("n"))])
    node = stored(changes_of(out, kinds.NODE.mirror)["n"])
    assert "images" not in node["status"]
    assert node["status"]["conditions"]


def test_a_pod_moving_nodes_leaves_one_index_value_and_enters_the_other() -> None:
    proc = Processor(Store(NS))
    proc.process([WatchEvent(kinds.POD.mirror, ADDED, fx.pod("p", node_name="a"))])
    change = changes_of(
        proc.process([WatchEvent(kinds.POD.mirror, MODIFIED, fx.pod("p", node_name="b", rv="2"))]),
        kinds.POD.mirror,
    )
    assert change["default/p"].old_index == {layout.BY_NODE: ["a"]}
    assert change["default/p"].new_index == {layout.BY_NODE: ["b"]}
    assert proc.store.index_keys(kinds.POD.mirror, layout.BY_NODE, "a") == set()


def test_an_object_changed_twice_in_one_batch_is_written_once_with_both_index_moves() -> None:
    proc = Processor(Store(NS))
    proc.process([WatchEvent(kinds.POD.mirror, ADDED, fx.pod("p", node_name="a"))])
    out = proc.process(
        [
            WatchEvent(kinds.POD.mirror, MODIFIED, fx.pod("p", node_name="b", rv="2")),
            WatchEvent(kinds.POD.mirror, ADDED, fx.pod("q", node_name="b")),
            WatchEvent(kinds.POD.mirror, MODIFIED, fx.pod("p", node_name="c", rv="3")),
        ]
    )
    assert [c.key for c in out.commit.changes] == ["default/p", "default/q"]
    change = out.commit.changes[0]
    assert stored(change)["metadata"]["resourceVersion"] == "3"
    assert (change.old_index, change.new_index) == ({layout.BY_NODE: ["a"]}, {layout.BY_NODE: ["c"]})


def test_an_object_added_and_deleted_in_one_batch_leaves_only_its_removal() -> None:
    proc = Processor(Store(NS))
    proc.process([WatchEvent(kinds.POD.mirror, ADDED, fx.pod("p", node_name="a"))])
    out = proc.process(
        [
            WatchEvent(kinds.POD.mirror, MODIFIED, fx.pod("p", node_name="b", rv="2")),
            WatchEvent(kinds.POD.mirror, DELETED, fx.pod("p", node_name="b", rv="3")),
        ]
    )
    (change,) = out.commit.changes
    assert change.stored is None
    assert (change.old_index, change.new_index) == ({layout.BY_NODE: ["a"]}, {})


def test_a_duplicate_event_writes_nothing() -> None:
    proc = Processor(Store(NS))
    proc.process([WatchEvent(kinds.MACHINE.mirror, ADDED, fx.machine("m"))])
    out = proc.process([WatchEvent(kinds.MACHINE.mirror, MODIFIED, fx.machine("m"))])
    assert not out.commit.changes and not out.routing


def test_secrets_are_mirrored_without_their_data_but_with_a_digest_of_it() -> None:
    proc = Processor(Store(NS))
    applied = fx.secret("s")
    applied["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": '{"data":{"userData":"c2VjcmV0"}}',
        "team": "a",
    }
    applied["stringData"] = {"token": "plain"}
    out = proc.process([WatchEvent(kinds.SECRET.mirror, ADDED, applied)])
    first = stored(changes_of(out, kinds.SECRET.mirror)[f"{NS}/s"])
    assert "data" not in first and "stringData" not in first
    assert "c2VjcmV0" not in orjson.dumps(first).decode() and "plain" not in orjson.dumps(first).decode()
    annotations = first["metadata"]["annotations"]
    assert set(annotations) == {"team", layout.DATA_DIGEST_ANNOTATION}
    assert proc.store.get(kinds.SECRET.mirror, f"{NS}/s") == first  # nor in the informer's memory

    # a class referencing it changes nothing about how it is stored
    out = proc.process([WatchEvent(kinds.MACHINE_CLASS.mirror, ADDED, fx.machine_class("c", secret="s"))])
    assert kinds.SECRET.mirror not in {c.kind for c in out.commit.changes}

    # new data: a new digest, and the classes that use the secret are woken
    out = proc.process(
        [WatchEvent(kinds.SECRET.mirror, MODIFIED, fx.secret("s", rv="2", data={"userData": "bmV3"}))]
    )
    second = stored(changes_of(out, kinds.SECRET.mirror)[f"{NS}/s"])
    assert "data" not in second
    assert (
        second["metadata"]["annotations"][layout.DATA_DIGEST_ANNOTATION]
        != annotations[layout.DATA_DIGEST_ANNOTATION]
    )
    assert ("machineclass", f"{NS}/c") in out.routing.items()

    # same data, new resourceVersion (a label): stored again, classes not woken
    relabelled = fx.secret("s", rv="3", data={"userData": "bmV3"})
    relabelled["metadata"]["labels"] = {"x": "y"}
    out = proc.process([WatchEvent(kinds.SECRET.mirror, MODIFIED, relabelled)])
    third = stored(changes_of(out, kinds.SECRET.mirror)[f"{NS}/s"])
    assert third["metadata"]["annotations"] == second["metadata"]["annotations"]
    assert ("machineclass", f"{NS}/c") not in out.routing.items()


def test_relist_deletes_and_routes_what_vanished_and_skips_what_did_not_change() -> None:
    proc = Processor(Store(NS))
    proc.process(
        [WatchEvent(kinds.MACHINE.mirror, ADDED, fx.machine(n, machine_set="s")) for n in ("a", "b", "c")]
    )
    out = proc.process(
        [
            Relisted(
                kinds.MACHINE.mirror,
                [fx.machine("a", machine_set="s"), fx.machine("b", rv="9", machine_set="s")],
                "10",
            )
        ]
    )
    assert {c.key: c.stored is None for c in out.commit.changes} == {f"{NS}/b": False, f"{NS}/c": True}
    assert ("machine-termination", f"{NS}/c") in out.routing.items()
    assert list(out.routing.deletions_observed) == [(f"{NS}/s", "c")]
    assert out.commit.synced == {kinds.MACHINE.mirror: "10"}
    assert proc.store.keys(kinds.MACHINE.mirror) == [f"{NS}/a", f"{NS}/b"]


def test_initial_list_announces_every_object_but_does_not_recount_creations_already_seen() -> None:
    proc = Processor(Store(NS))
    proc.seed(kinds.MACHINE.mirror, [(f"{NS}/old", fx.machine("old", machine_set="s"))])
    out = proc.process(
        [
            Relisted(
                kinds.MACHINE.mirror,
                [fx.machine("old", machine_set="s"), fx.machine("new", machine_set="s")],
                "5",
                initial=True,
            )
        ]
    )
    assert [c.key for c in out.commit.changes] == [f"{NS}/new"], "what the mirror holds is not rewritten"
    assert ("machine", f"{NS}/old") in out.routing.items()
    assert ("machine", f"{NS}/new") in out.routing.items()
    assert out.routing.creations_observed == [f"{NS}/s"]


def test_a_seeded_object_that_vanished_before_the_first_list_is_deleted_with_its_index_entries() -> None:
    proc = Processor(Store(NS))
    proc.seed(
        kinds.POD.mirror,
        [("default/p", {"metadata": {"name": "p", "namespace": "default"}, "spec": {"nodeName": "n"}})],
    )
    out = proc.process([Relisted(kinds.POD.mirror, [], "3", initial=True)])
    (change,) = out.commit.changes
    assert change.stored is None and change.old_index == {layout.BY_NODE: ["n"]}


# --- Node status heartbeats: mirrored, but with the next commit -----------------------------------


def healthy_pair(proc: Processor) -> None:
    """A Running machine whose conditions match its node's: a heartbeat wakes nothing."""
    ready = [{"type": "Ready", "status": "True"}]
    proc.process(
        [
            WatchEvent(
                kinds.MACHINE.mirror, ADDED, fx.machine("m", node="n", phase="Running", conditions=ready)
            ),
            WatchEvent(kinds.NODE.mirror, ADDED, fx.node("n", rv="10")),
        ]
    )


def test_a_node_heartbeat_that_wakes_nothing_is_a_lazy_change_with_its_new_resource_version() -> None:
    proc = Processor(Store(NS))
    healthy_pair(proc)
    out = proc.process([WatchEvent(kinds.NODE.mirror, MODIFIED, fx.node("n", rv="11"))])
    change = changes_of(out, kinds.NODE.mirror)["n"]
    assert change.lazy and not out.commit.urgent and not out.routing
    # the mirror keeps what its readers use: the resourceVersion of guarded writes, the heartbeat
    assert stored(change)["metadata"]["resourceVersion"] == "11"
    assert stored(change)["status"]["conditions"][0]["lastHeartbeatTime"] == "2026-01-01T00:00:11Z"
    assert proc.store.get(kinds.NODE.mirror, "n")["metadata"]["resourceVersion"] == "11"  # type: ignore[index]


def test_a_node_update_beyond_its_heartbeat_is_written_at_once() -> None:
    for changed in (
        fx.node("n", rv="11", conditions={"Ready": "False"}),
        fx.node("n", rv="11", labels={"x": "y"}),
        fx.node("n", rv="11", taints=["t"]),
        fx.node("n", rv="11", volumes=["v"]),
    ):
        proc = Processor(Store(NS))
        healthy_pair(proc)
        out = proc.process([WatchEvent(kinds.NODE.mirror, MODIFIED, changed)])
        assert out.commit.urgent and not changes_of(out, kinds.NODE.mirror)["n"].lazy


def test_a_node_heartbeat_that_wakes_its_machine_is_written_at_once() -> None:
    """The machine's conditions lag the node's: the heartbeat wakes it, and it must find the node."""
    proc = Processor(Store(NS))
    proc.process(
        [
            WatchEvent(
                kinds.MACHINE.mirror, ADDED, fx.machine("m", node="n", phase="Running", conditions=[])
            ),
            WatchEvent(kinds.NODE.mirror, ADDED, fx.node("n", rv="10")),
        ]
    )
    out = proc.process([WatchEvent(kinds.NODE.mirror, MODIFIED, fx.node("n", rv="11"))])
    assert out.commit.urgent
    assert (kinds.machine_queue(False), f"{NS}/m") in out.routing.enqueue


def test_held_back_changes_join_a_later_commit_and_an_urgent_change_of_the_same_object_wins() -> None:
    proc = Processor(Store(NS))
    healthy_pair(proc)
    held = proc.process([WatchEvent(kinds.NODE.mirror, MODIFIED, fx.node("n", rv="11"))]).commit
    held.absorb(proc.process([WatchEvent(kinds.POD.mirror, ADDED, fx.pod("p", node_name="n"))]).commit)
    assert held.urgent and [c.key for c in held.changes] == ["n", "default/p"]
    held = proc.process([WatchEvent(kinds.NODE.mirror, MODIFIED, fx.node("n", rv="12"))]).commit
    held.absorb(
        proc.process(
            [WatchEvent(kinds.NODE.mirror, MODIFIED, fx.node("n", rv="13", labels={"a": "b"}))]
        ).commit
    )
    (change,) = held.changes
    assert not change.lazy and stored(change)["metadata"]["resourceVersion"] == "13"


def test_a_commit_is_urgent_exactly_while_one_of_its_changes_is_not_lazy() -> None:
    """``urgent`` is kept as changes are added and merged (the writer asks it after every batch
    while heartbeats pile up): lazy ones alone wait; an eager change, or a lazy change merged
    with an eager one of the same object, makes the commit urgent, and stays so."""
    commit = Commit()
    for i in range(50):
        commit.add(Change("node", f"n{i}", b"{}", lazy=True))
    assert not commit.urgent
    commit.add(Change("node", "n7", b"{}", lazy=True))
    assert not commit.urgent and len(commit.changes) == 50
    commit.add(Change("node", "n7", b"{}", lazy=False))
    assert commit.urgent and len(commit.changes) == 50
    commit.add(Change("node", "n7", b"{}", lazy=True))  # an eager change merged stays eager
    assert commit.urgent and not commit.changes[7].lazy
    held = Commit()
    held.add(Change("pod", "p", None, lazy=False))
    later = Commit()
    later.add(Change("pod", "p", b"{}", lazy=True))
    held.absorb(later)
    assert held.urgent and [c.key for c in held.changes] == ["p"]
    assert not Commit().urgent and Commit(sentinel="e").urgent and Commit(synced={"node": "1"}).urgent
