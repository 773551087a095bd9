"""Node syncing (pure): three-way merges of labels, annotations, taints, and virtual capacity."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcm_tasks.api import Machine, MachineClass, Taint
from mcm_tasks.controllers.machine.nodesync import (
    last_applied_value,
    node_sync_patch,
    parse_last_applied,
    sync_map,
    sync_taints,
    virtual_capacity_patches,
)

LAST_APPLIED = "node.machine.sapcloud.io/last-applied-anno-labels-taints"
MACHINE_NAME = "node.gardener.cloud/machine-name"
FINALIZER = "node.machine.sapcloud.io/machine-controller"


@pytest.mark.parametrize(
    ("current", "desired", "last", "changes"),
    [
        ({}, {}, {}, {}),
        ({}, {"a": "1"}, {}, {"a": "1"}),
        ({"a": "1"}, {"a": "1"}, {"a": "1"}, {}),
        ({"a": "0"}, {"a": "1"}, {"a": "0"}, {"a": "1"}),
        # applied before and no longer wanted: removed
        ({"a": "1", "b": "2"}, {"a": "1"}, {"a": "1", "b": "2"}, {"b": None}),
        # never applied by us: left alone
        ({"kubelet": "x"}, {}, {}, {}),
        # applied before, already gone from the node: nothing to remove
        ({}, {}, {"b": "2"}, {}),
    ],
)
def test_sync_map(
    current: dict[str, str], desired: dict[str, str], last: dict[str, str], changes: dict[str, Any]
) -> None:
    assert sync_map(current, desired, last) == changes


def taint(key: str, effect: str = "NoSchedule", value: str = "") -> Taint:
    return Taint(key=key, value=value, effect=effect)


def td(key: str, effect: str = "NoSchedule", value: str = "") -> dict[str, str]:
    out = {"key": key, "effect": effect}
    if value:
        out["value"] = value
    return out


@pytest.mark.parametrize(
    ("current", "desired", "last", "expected"),
    [
        ([], [], [], None),
        ([], [taint("a")], [], [td("a")]),
        ([td("a")], [taint("a")], [taint("a")], None),
        # same key, other effect: a different taint
        ([td("a")], [taint("a", "NoExecute")], [taint("a")], [td("a", "NoExecute")]),
        # value changed: replaced in place, order kept
        (
            [td("x"), td("a", value="1"), td("y")],
            [taint("a", value="2")],
            [taint("a", value="1")],
            [td("x"), td("a", value="2"), td("y")],
        ),
        # removed from the template: removed from the node; others' taints stay
        ([td("other"), td("a")], [], [taint("a")], [td("other")]),
        # never ours: stays
        ([td("other")], [], [], None),
    ],
)
def test_sync_taints(
    current: list[dict[str, str]],
    desired: list[Taint],
    last: list[Taint],
    expected: list[dict[str, str]] | None,
) -> None:
    assert sync_taints(current, desired, last) == expected


def machine(template: dict[str, Any] | None = None) -> Machine:
    spec: dict[str, Any] = {"class": {"kind": "MachineClass", "name": "c1"}}
    if template is not None:
        spec["nodeTemplate"] = template
    return Machine.model_validate({"metadata": {"name": "m1", "namespace": "default"}, "spec": spec})


def node(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    finalizers: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "m1",
            "resourceVersion": "42",
            "labels": labels or {},
            "annotations": annotations or {},
            "finalizers": finalizers or [],
        },
        "spec": {"taints": taints or []},
    }


TEMPLATE = {
    "metadata": {"labels": {"role": "worker"}, "annotations": {"team": "a"}},
    "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
}


def test_first_sync_sets_everything_with_the_finalizer() -> None:
    patch = node_sync_patch(
        node(labels={"kubernetes.io/hostname": "m1"}), machine(TEMPLATE), add_finalizer=True
    )
    assert patch is not None
    meta = patch["metadata"]
    assert meta["labels"] == {"role": "worker", MACHINE_NAME: "m1"}
    assert meta["annotations"]["team"] == "a"
    assert parse_last_applied(meta["annotations"][LAST_APPLIED]).metadata.labels == {"role": "worker"}
    assert meta["finalizers"] == [FINALIZER]
    assert meta["resourceVersion"] == "42"
    assert patch["spec"] == {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}


def synced_node(template: dict[str, Any]) -> dict[str, Any]:
    m = machine(template)
    return node(
        labels={"role": "worker", MACHINE_NAME: "m1"},
        annotations={"team": "a", LAST_APPLIED: last_applied_value(m.spec.node_template)},  # type: ignore[arg-type]
        taints=[td("dedicated", value="gpu")],
        finalizers=[FINALIZER],
    )


def test_a_synced_node_needs_no_patch() -> None:
    assert node_sync_patch(synced_node(TEMPLATE), machine(TEMPLATE), add_finalizer=True) is None


def test_template_change_removes_what_was_applied_before() -> None:
    new_template = {"metadata": {"labels": {"role": "edge"}}}
    patch = node_sync_patch(synced_node(TEMPLATE), machine(new_template), add_finalizer=True)
    assert patch is not None
    assert patch["metadata"]["labels"] == {"role": "edge"}
    assert patch["metadata"]["annotations"]["team"] is None
    assert patch["spec"] == {"taints": []}
    assert json.loads(patch["metadata"]["annotations"][LAST_APPLIED])["metadata"] == {
        "labels": {"role": "edge"}
    }


def test_no_template_only_the_machine_name_label_and_finalizer() -> None:
    patch = node_sync_patch(node(), machine(), add_finalizer=True)
    assert patch == {
        "metadata": {"labels": {MACHINE_NAME: "m1"}, "finalizers": [FINALIZER], "resourceVersion": "42"}
    }
    assert node_sync_patch(node(labels={MACHINE_NAME: "m1"}), machine(), add_finalizer=False) is None


def test_an_unreadable_last_applied_record_counts_as_nothing_applied() -> None:
    assert parse_last_applied("{not json").metadata.labels == {}
    patch = node_sync_patch(
        node(annotations={LAST_APPLIED: "{not json"}), machine(TEMPLATE), add_finalizer=False
    )
    assert patch is not None and patch["metadata"]["labels"]["role"] == "worker"


def klass(virtual: dict[str, Any] | None) -> MachineClass:
    template: dict[str, Any] = {"capacity": {"cpu": "2"}, "instanceType": "t", "region": "r", "zone": "z"}
    if virtual is not None:
        template["virtualCapacity"] = virtual
    return MachineClass.model_validate(
        {"metadata": {"name": "c1"}, "providerSpec": {}, "nodeTemplate": template}
    )


def test_virtual_capacity_is_merged_into_status_capacity() -> None:
    n = {"metadata": {"annotations": {}}, "status": {"capacity": {"cpu": "2", "memory": "4Gi"}}}
    patches = virtual_capacity_patches(n, klass({"example.com/slots": 10}))
    assert patches is not None
    status, meta = patches
    assert status == {"status": {"capacity": {"example.com/slots": "10"}}}
    record = meta["metadata"]["annotations"]["node.machine.sapcloud.io/last-applied-virtual-capacity"]
    assert json.loads(record) == {"example.com/slots": "10"}
    synced = {
        "metadata": {"annotations": {"node.machine.sapcloud.io/last-applied-virtual-capacity": record}},
        "status": {"capacity": {"cpu": "2", "example.com/slots": "10"}},
    }
    assert virtual_capacity_patches(synced, klass({"example.com/slots": 10})) is None
    removed = virtual_capacity_patches(synced, klass(None))
    assert removed is not None
    assert removed[0] == {"status": {"capacity": {"example.com/slots": None}}}
    assert (
        removed[1]["metadata"]["annotations"]["node.machine.sapcloud.io/last-applied-virtual-capacity"]
        is None
    )


def test_no_virtual_capacity_nothing_to_do() -> None:
    assert virtual_capacity_patches({"status": {"capacity": {"cpu": "2"}}}, klass(None)) is None
    assert virtual_capacity_patches({"status": {}}, None) is None
