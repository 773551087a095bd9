"""Orphan VMs and unmanaged Nodes: the decisions of ``mcm_tasks.controllers.safety.orphans``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from mcm_tasks.api import Machine
from mcm_tasks.api.constants import NODE_FINALIZER, NODE_LABEL_KEY, NOT_MANAGED_BY_MCM_ANNOTATION
from mcm_tasks.controllers.safety.orphans import (
    MachineFacts,
    NodeAction,
    OrphanVM,
    VMVerdict,
    facts_of,
    machine_counts_by_node,
    may_need_action,
    node_action,
    node_patch,
    orphan_vms,
    stub_machine,
    vm_verdict,
)
from mcm_tasks.controllers.safety.reads_io import orphan_facts

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
TIMEOUT = 20 * 60.0


def machine_body(
    name: str = "m", provider_id: str = "", phase: str = "Running", node: str = ""
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": {NODE_LABEL_KEY: node} if node else {}},
        "spec": {"class": {"kind": "MachineClass", "name": "c"}, "providerID": provider_id},
        "status": {"currentStatus": {"phase": phase}},
    }


def machine(name: str = "m", provider_id: str = "", phase: str = "Running", node: str = "") -> MachineFacts:
    return facts_of(Machine.model_validate(machine_body(name, provider_id, phase, node)))


@pytest.mark.parametrize(
    ("vm_provider_id", "found", "verdict"),
    [
        pytest.param("p1", None, VMVerdict.ORPHAN, id="no-machine-deleted"),
        pytest.param("p1", machine(provider_id="p1"), VMVerdict.OWNED, id="matching-providerID-kept"),
        pytest.param("p2", machine(provider_id="p1"), VMVerdict.ORPHAN, id="providerID-mismatch-deleted"),
        pytest.param(
            "p2", machine(provider_id="p1", phase="Unknown"), VMVerdict.ORPHAN, id="mismatch-unknown"
        ),
        pytest.param("p2", machine(provider_id="p1", phase="Failed"), VMVerdict.ORPHAN, id="mismatch-failed"),
        pytest.param("p1", machine(phase=""), VMVerdict.CREATING, id="empty-phase-kept"),
        pytest.param(
            "p2", machine(provider_id="p1", phase=""), VMVerdict.CREATING, id="empty-phase-mismatch-kept"
        ),
        pytest.param("p1", machine(phase="CrashLoopBackOff"), VMVerdict.CREATING, id="crashloop-kept"),
        pytest.param("p1", machine(phase="Pending"), VMVerdict.ORPHAN, id="pending-without-providerID"),
        pytest.param(
            "p1",
            machine(provider_id="p1", phase="Terminating"),
            VMVerdict.OWNED,
            id="terminating-own-vm-kept",
        ),
    ],
)
def test_vm_verdict(vm_provider_id: str, found: MachineFacts | None, verdict: VMVerdict) -> None:
    assert vm_verdict(vm_provider_id, found) is verdict


def test_orphan_vms_of_a_class_listing() -> None:
    machines = {
        "a": machine("a", "pa"),
        "b": machine("b", "pb"),
        "creating": machine("creating", phase=""),
    }
    listed = {"pa": "a", "pb2": "b", "pc": "creating", "pz": "gone"}
    assert orphan_vms(listed, machines) == [OrphanVM("pb2", "b"), OrphanVM("pz", "gone")]


def test_stub_machine_carries_name_and_provider_id_only() -> None:
    stub = stub_machine(OrphanVM("aws:///z/i-1", "m1"), "ns", "cls")
    assert (stub.metadata.name, stub.metadata.namespace, stub.spec.provider_id) == (
        "m1",
        "ns",
        "aws:///z/i-1",
    )
    assert stub.spec.class_.name == "cls" and stub.metadata.uid is None and not stub.metadata.labels


def node(
    age: float, *, annotated: bool = False, finalized: bool = False, created: bool = True
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "n1", "resourceVersion": "5"}
    if created:
        meta["creationTimestamp"] = (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    if annotated:
        meta["annotations"] = {NOT_MANAGED_BY_MCM_ANNOTATION: "1", "other": "x"}
    if finalized:
        meta["finalizers"] = ["keep/me", NODE_FINALIZER]
    return {"metadata": meta}


OLD, YOUNG = TIMEOUT + 60, TIMEOUT - 60


@pytest.mark.parametrize(
    ("the_node", "machines", "action"),
    [
        pytest.param(node(OLD), 0, NodeAction(annotate=True), id="old-unclaimed-annotated"),
        pytest.param(
            node(OLD, finalized=True),
            0,
            NodeAction(annotate=True, remove_finalizer=True),
            id="finalizer-removed",
        ),
        pytest.param(node(OLD, annotated=True), 0, NodeAction(), id="already-annotated"),
        pytest.param(
            node(OLD, annotated=True, finalized=True),
            0,
            NodeAction(remove_finalizer=True),
            id="finalizer-left",
        ),
        pytest.param(node(YOUNG, finalized=True), 0, NodeAction(), id="young-unclaimed-left"),
        pytest.param(node(OLD, created=False), 0, NodeAction(), id="no-creation-time-left"),
        pytest.param(node(OLD, annotated=True), 1, NodeAction(unannotate=True), id="claimed-unannotated"),
        pytest.param(node(OLD, finalized=True), 1, NodeAction(), id="claimed-unannotated-already"),
        pytest.param(node(OLD, annotated=True), 2, NodeAction(), id="claimed-twice-left"),
        pytest.param(node(OLD), 2, NodeAction(), id="claimed-twice-not-annotated"),
    ],
)
def test_node_action(the_node: dict[str, Any], machines: int, action: NodeAction) -> None:
    assert node_action(the_node, machines, NOW, TIMEOUT) == action


NODE_CASES = [
    (node(OLD), 0), (node(OLD, finalized=True), 0), (node(OLD, annotated=True), 0), (node(YOUNG), 0),
    (node(OLD, annotated=True), 1), (node(OLD, finalized=True), 1), (node(OLD), 1),
    (node(OLD, annotated=True), 2), (node(OLD), 2),
]  # fmt: skip


@pytest.mark.parametrize(("the_node", "machines"), NODE_CASES)
def test_a_node_the_prefilter_passes_over_needs_no_action(the_node: dict[str, Any], machines: int) -> None:
    """``may_need_action`` never hides a change ``node_action`` would make, whatever the JSON's order."""
    for stored in (orjson.dumps(the_node), orjson.dumps(the_node, option=orjson.OPT_SORT_KEYS)):
        if node_action(the_node, machines, NOW, TIMEOUT).needed:
            assert may_need_action(stored, machines)


@pytest.mark.parametrize(
    ("the_node", "machines", "decode"),
    [
        pytest.param(node(OLD), 1, False, id="claimed-plain-skipped"),
        pytest.param(node(OLD, finalized=True), 1, False, id="claimed-finalized-skipped"),
        pytest.param(node(OLD, annotated=True), 1, True, id="claimed-annotated-decoded"),
        pytest.param(node(OLD, annotated=True), 2, False, id="claimed-twice-skipped"),
        pytest.param(node(OLD), 0, True, id="unclaimed-decoded"),
        pytest.param(
            {"metadata": {"name": "n", "labels": {NOT_MANAGED_BY_MCM_ANNOTATION: "1"}}},
            1,
            True,
            id="key-elsewhere-costs-a-decode",
        ),
    ],
)
def test_may_need_action(the_node: dict[str, Any], machines: int, decode: bool) -> None:
    assert may_need_action(orjson.dumps(the_node), machines) is decode


RUNNING = {
    "metadata": {"name": "m", "namespace": "ns", "labels": {NODE_LABEL_KEY: "n", "x": "y"}, "uid": "u",
                 "ownerReferences": [{"kind": "MachineSet", "name": "s", "uid": "s", "apiVersion": "v"}]},
    "spec": {"class": {"kind": "MachineClass", "name": "c"}, "providerID": "p",
             "nodeTemplate": {"metadata": {"labels": {"a": "b"}}}},
    "status": {"currentStatus": {"phase": "Running", "lastUpdateTime": "2026-05-01T12:00:00Z"},
               "conditions": [{"type": "Ready", "status": "True"}], "lastOperation": {"description": "x"}},
}  # fmt: skip


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(RUNNING, id="running"),
        pytest.param(machine_body("m", "", ""), id="being-created"),
        pytest.param(machine_body("m", "p", "CrashLoopBackOff", node="n"), id="crashloop"),
        pytest.param({"metadata": {"name": "m"}, "spec": {"class": {"name": "c"}}}, id="no-status"),
    ],
)
def test_orphan_facts_of_a_stored_machine_are_its_model_s(raw: dict[str, Any]) -> None:
    assert orphan_facts(raw) == facts_of(Machine.model_validate(raw))


@pytest.mark.parametrize(
    ("raw", "facts"),
    [
        pytest.param(
            {"metadata": {"name": "m", "labels": ["x"]}, "spec": ["no", "object"], "status": "nor this"},
            MachineFacts("m"),
            id="parts-that-are-no-objects",
        ),
        pytest.param(
            {
                "metadata": {"name": "m"},
                "spec": {"providerID": 7},
                "status": {"currentStatus": {"phase": None}},
            },
            MachineFacts("m"),
            id="values-that-are-no-strings",
        ),
        pytest.param({"metadata": {}}, None, id="no-name"),
        pytest.param({}, None, id="no-metadata"),
    ],
)
def test_orphan_facts_read_content_of_another_type_as_absent(
    raw: dict[str, Any], facts: MachineFacts | None
) -> None:
    assert orphan_facts(raw) == facts


def test_node_patches_are_conditional_and_touch_only_their_keys() -> None:
    n = node(OLD, finalized=True)
    assert node_patch(n, NodeAction()) is None
    assert node_patch(n, NodeAction(annotate=True, remove_finalizer=True)) == {
        "metadata": {
            "resourceVersion": "5",
            "annotations": {NOT_MANAGED_BY_MCM_ANNOTATION: "1"},
            "finalizers": ["keep/me"],
        }
    }
    assert node_patch(node(OLD, annotated=True), NodeAction(unannotate=True)) == {
        "metadata": {"resourceVersion": "5", "annotations": {NOT_MANAGED_BY_MCM_ANNOTATION: None}}
    }


def test_machine_counts_by_node() -> None:
    machines = [machine("a", node="n1"), machine("b", node="n1"), machine("c", node="n2"), machine("d")]
    assert machine_counts_by_node(machines) == {"n1": 2, "n2": 1}
