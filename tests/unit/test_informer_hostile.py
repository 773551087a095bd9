"""No object content stops the informer's writer: what it cannot index or route is mirrored all the
same, its own key still enqueued, and reported as a Problem (issue 13, item 6)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from informers.events import ADDED, MAX_KEY_LENGTH, MODIFIED, Problem, Routing
from informers.informer import Reflector
from informers.problems import OBJECT_PROBLEMS, ProblemReporter
from informers.processor import (
    UNINDEXABLE,
    UNMIRRORABLE,
    UNROUTABLE,
    UNUSABLE_SELECTOR,
    Processor,
    WatchEvent,
)
from informers.resources import MAX_INDEX_VALUE_LENGTH, WATCHES
from informers.routing import owner_selector
from informers.runner import Informer
from informers.sink import MemorySink
from informers.store import Store
from mcm_sandbox.testing import fixtures as fx
from mcm_tasks import kinds
from mcm_tasks.api import Obj
from mcm_tasks.cache import layout
from mcm_tasks.settings import Settings

NS = fx.NS


def near_set(name: str = "near") -> Obj:
    obj = fx.machine_set(name, selector={"app": "x"})
    obj["spec"]["selector"] = {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}
    return obj


def test_a_set_with_an_unknown_operator_does_not_stop_the_routing_of_orphans() -> None:
    processor = Processor(Store(NS))
    healthy = fx.machine_set("healthy", selector={"app": "x"})
    added = processor.process([WatchEvent(kinds.MACHINE_SET.mirror, ADDED, near_set()),
                               WatchEvent(kinds.MACHINE_SET.mirror, ADDED, healthy)])  # fmt: skip
    assert [(p.key, p.reason) for p in added.problems] == [(f"{NS}/near", UNUSABLE_SELECTOR)]
    assert "'Near' is not a valid selector operator" in added.problems[0].message

    orphan = fx.machine("orphan", labels={"app": "x"})
    out = processor.process([WatchEvent(kinds.MACHINE.mirror, ADDED, orphan)])
    assert ("machineset", f"{NS}/healthy") in out.routing.items()
    assert ("machineset", f"{NS}/near") not in out.routing.items()
    assert out.problems == []


@pytest.mark.parametrize(
    "selector",
    [
        {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In"}]},
        {"matchExpressions": "not a list"},
        {"matchLabels": ["a", "b"]},
        {},
    ],
)
def test_owner_selector_is_none_for_what_cannot_select(selector: Obj) -> None:
    assert owner_selector({"spec": {"selector": selector}}) is None


def test_content_that_breaks_an_index_is_mirrored_under_the_others_and_reported() -> None:
    processor = Processor(Store(NS))
    cls = fx.machine_class("cls")
    cls["secretRef"] = "not-an-object"  # the schema types it; a hostile server or an old CRD might not
    out = processor.process([WatchEvent(kinds.MACHINE_CLASS.mirror, ADDED, cls)])
    assert [c.key for c in out.commit.changes] == [f"{NS}/cls"]
    assert out.commit.changes[0].stored is not None
    assert [(p.reason, p.kind) for p in out.problems] == [(UNINDEXABLE, kinds.MACHINE_CLASS.mirror)]
    assert ("machineclass", f"{NS}/cls") in out.routing.items()


def test_index_values_longer_than_a_name_are_not_filed() -> None:
    machine = fx.machine("m")
    machine["spec"]["class"]["name"] = "c" * (MAX_INDEX_VALUE_LENGTH + 1)
    values, problems = WATCHES[kinds.MACHINE].indexed(machine)
    assert values[layout.BY_CLASS] == []
    assert problems and "longer than" in problems[0]


def test_routing_that_raises_still_wakes_the_object_itself() -> None:
    processor = Processor(Store(NS))
    machine = fx.machine("m")
    machine["metadata"]["ownerReferences"] = ["a string where an object belongs"]
    out = processor.process([WatchEvent(kinds.MACHINE.mirror, ADDED, machine)])
    assert ("machine", f"{NS}/m") in out.routing.items()
    assert [p.reason for p in out.problems] == [UNINDEXABLE, UNROUTABLE]
    # and the next event of the same object is handled too
    fixed = fx.machine("m", rv="2", generation=2)
    again = processor.process([WatchEvent(kinds.MACHINE.mirror, MODIFIED, fixed)])
    assert ("machine", f"{NS}/m") in again.routing.items()


def test_a_class_reference_of_the_wrong_shape_routes_to_no_class() -> None:
    machine = fx.machine("m")
    machine["spec"]["class"] = "a string where an object belongs"
    out = Processor(Store(NS)).process([WatchEvent(kinds.MACHINE.mirror, ADDED, machine)])
    assert out.problems == [] and ("machine", f"{NS}/m") in out.routing.items()


def test_problems_carry_identity_only() -> None:
    processor = Processor(Store(NS))
    obj = near_set()
    obj["spec"]["template"] = {"metadata": {"annotations": {"secret": "s3cr3t"}}}
    problem = processor.process([WatchEvent(kinds.MACHINE_SET.mirror, ADDED, obj)]).problems[0]
    assert problem.identity == {
        "apiVersion": obj["apiVersion"],
        "kind": "MachineSet",
        "metadata": {k: obj["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion")},
    }
    assert "s3cr3t" not in repr(problem)


def test_the_reporter_counts_logs_and_records_without_blocking_the_writer() -> None:
    recorded: list[tuple[str, str]] = []
    reporter = ProblemReporter(lambda identity, reason, message: recorded.append((reason, message)))
    before = OBJECT_PROBLEMS.labels(kinds.MACHINE_SET.mirror, UNUSABLE_SELECTOR)._value.get()
    problem = Problem(
        kinds.MACHINE_SET.mirror, f"{NS}/near", {"kind": "MachineSet"}, UNUSABLE_SELECTOR, "bad"
    )
    reporter.report([problem, problem])
    reporter.close()
    assert recorded == [(UNUSABLE_SELECTOR, "bad")] * 2
    assert OBJECT_PROBLEMS.labels(kinds.MACHINE_SET.mirror, UNUSABLE_SELECTOR)._value.get() == before + 2


def test_a_failing_recorder_does_not_stop_the_reporter() -> None:
    def broken(identity: Obj, reason: str, message: str) -> None:
        raise RuntimeError("api down")

    reporter = ProblemReporter(broken)
    reporter.report([Problem(kinds.MACHINE.mirror, f"{NS}/m", {}, UNROUTABLE, "x")])
    reporter.close()
    assert reporter._thread is None


# --- content no JSON library here can handle ----------------------------------------------------------


def deep_json(depth: int) -> bytes:
    """A value nested ``depth`` levels: past orjson's decoding limit (1024) at 1100."""
    return b'{"a":' * depth + b"1" + b"}" * depth


def raw_class(name: str, rv: str, deep: bool = False) -> bytes:
    spec = deep_json(1100) if deep else b"{}"
    return (
        b'{"apiVersion":"machine.sapcloud.io/v1alpha1","kind":"MachineClass","metadata":{"name":"'
        + name.encode() + b'","namespace":"' + NS.encode() + b'","resourceVersion":"' + rv.encode()
        + b'"},"providerSpec":' + spec + b"}"
    )  # fmt: skip


def reflector(emitted: list[Any]) -> Reflector:
    return Reflector(WATCHES[kinds.MACHINE_CLASS], None, NS, emitted.append, Settings(), threading.Event())  # type: ignore[arg-type]


def test_a_watch_event_too_deep_to_decode_is_skipped_and_the_watch_moves_past_it() -> None:
    emitted: list[Any] = []
    r = reflector(emitted)
    r._handle(b'{"type":"ADDED","object":' + raw_class("deep", "7", deep=True) + b"}")
    assert emitted == [] and r.stats.undecodable == 1 and r.stats.resource_version == "7"
    r._handle(b'{"type":"ADDED","object":' + raw_class("fine", "8") + b"}")
    assert [e.obj["metadata"]["name"] for e in emitted] == ["fine"]


def test_a_list_with_an_object_too_deep_to_decode_lists_the_others() -> None:
    objects = [raw_class(f"c{i}", str(i), deep=i == 3) for i in range(6)]
    r = reflector([])
    pages: list[int] = []

    def get_bytes(query: dict[str, Any]) -> bytes:
        start, limit = int(query.get("continue") or 0), int(query["limit"])
        pages.append(limit)
        chunk, end = objects[start : start + limit], start + limit
        cont = f',"continue":"{end}"' if end < len(objects) else ""
        return (
            b'{"metadata":{"resourceVersion":"99"' + cont.encode() + b'},"items":[' + b",".join(chunk) + b"]}"
        )

    r._get_bytes = get_bytes  # type: ignore[method-assign]
    listed, version = r._list_all()
    assert [o["metadata"]["name"] for o in listed] == ["c0", "c1", "c2", "c4", "c5"]
    assert version == "99" and r.stats.undecodable == 1


def test_objects_deeper_than_orjson_writes_are_mirrored_and_deeper_ones_reported() -> None:
    processor = Processor(Store(NS))
    cls = fx.machine_class("deep300")
    cls["providerSpec"] = nest(300)
    out = processor.process([WatchEvent(kinds.MACHINE_CLASS.mirror, ADDED, cls)])
    assert out.problems == [] and out.commit.changes[0].stored is not None
    deeper = fx.machine_class("deep2000")
    deeper["providerSpec"] = nest(2000)
    out = processor.process([WatchEvent(kinds.MACHINE_CLASS.mirror, ADDED, deeper)])
    assert [p.reason for p in out.problems] == [UNMIRRORABLE] and out.commit.changes == []


def nest(depth: int) -> Obj:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return {"deep": value}


# --- keys no queue takes ----------------------------------------------------------------------------------


def test_a_reference_no_object_can_have_routes_nowhere() -> None:
    machine = fx.machine("m")
    machine["spec"]["class"]["name"] = "c" * 100_000
    out = Processor(Store(NS)).process([WatchEvent(kinds.MACHINE.mirror, ADDED, machine)])
    assert all(len(key) <= MAX_KEY_LENGTH for _, key in out.routing.items())
    assert ("machine", f"{NS}/m") in out.routing.items()


class PickySink(MemorySink):
    """Refuses a whole batch that holds a key it does not take, as the queue contract does."""

    def enqueue_many(self, items: list[tuple[str, str]]) -> int:
        if any(key.endswith("bad") for _, key in items):
            raise ValueError("a queue key this sink refuses")
        return super().enqueue_many(items)


def test_a_key_the_sink_refuses_costs_only_itself() -> None:
    sink = PickySink()
    informer = Informer(Settings(), {}, None, sink)  # type: ignore[arg-type]
    routing = Routing()
    for key in ("a", "bad", "b"):
        routing.add("machine", f"{NS}/{key}")
    routing.creations_observed.append(f"{NS}/set")
    informer._deliver(routing, threading.Event())
    assert sink.items == [("machine", f"{NS}/a"), ("machine", f"{NS}/b")]
    assert sink.creations == [(f"{NS}/set", 1)]  # once: the retry is of the keys alone
