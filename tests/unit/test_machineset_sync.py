"""In-place propagation of node template, machine configuration and class kind (``machineset.sync``)
and the creation body of new machines (``machineset.control_io.new_machine``)."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_sandbox.patch import merge_patch
from mcm_tasks.api import Machine, MachineSet
from mcm_tasks.api.constants import EFFECTIVE_CREATION_TIMEOUT_ANNOTATION, MCM_FINALIZER
from mcm_tasks.controllers.common.template import merge_diff, pruned
from mcm_tasks.controllers.machineset.control_io import new_machine
from mcm_tasks.controllers.machineset.sync import desired_of, propagation_patch

NODE_TEMPLATE = {
    "metadata": {"labels": {"role": "worker"}, "annotations": {"a": "1"}},
    "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
}


def machine_set(spec: dict[str, Any], **meta: Any) -> MachineSet:
    template = {
        "metadata": {"labels": {"app": "a"}},
        "spec": {"class": {"kind": "MachineClass", "name": "c"}},
    }
    template["spec"].update(spec)
    return MachineSet.model_validate(
        {"metadata": {"name": "ms", "namespace": "ns", "uid": "uid-ms", **meta},
         "spec": {"replicas": 1, "template": template}}
    )  # fmt: skip


def machine(spec: dict[str, Any], phase: str = "Running", kind: str = "MachineClass") -> Machine:
    return Machine.model_validate(
        {"metadata": {"name": "m"}, "spec": {"class": {"kind": kind, "name": "c"}, **spec},
         "status": {"currentStatus": {"phase": phase}}}
    )  # fmt: skip


def apply(m: Machine, patch: dict[str, Any] | None) -> dict[str, Any]:
    wire = m.to_api()
    return wire if patch is None else merge_patch(wire, patch)


@pytest.mark.parametrize(
    ("current", "desired"),
    [
        ({"a": 1}, {"a": 1}),
        ({"a": 1, "b": 2}, {"a": 1}),
        ({"a": {"x": 1, "y": 2}}, {"a": {"x": 1, "z": 3}}),
        ({"a": [1, 2]}, {"a": [2]}),
        ({}, {"a": {"b": {"c": 1}}}),
        ({"a": {"b": 1}}, {"a": "scalar"}),
    ],
)
def test_merge_diff_round_trips(current: dict[str, Any], desired: dict[str, Any]) -> None:
    assert merge_patch(current, merge_diff(current, desired)) == desired


def test_pruned_treats_empty_as_missing() -> None:
    assert pruned({"a": {}, "b": [], "c": "", "d": None, "e": {"f": {}}}) == {}
    assert pruned({"a": {"b": 1}}) == {"a": {"b": 1}}


def test_up_to_date_machine_needs_nothing() -> None:
    spec = {"nodeTemplate": NODE_TEMPLATE, "drainTimeout": "5m"}
    assert propagation_patch(machine(spec), desired_of(machine_set(spec))) is None
    # an empty template spelled out equals no template
    empty = desired_of(machine_set({"nodeTemplate": {"metadata": {"labels": {}}}}))
    assert propagation_patch(machine({}), empty) is None


def test_node_template_replaced_exactly() -> None:
    old = {"metadata": {"labels": {"role": "worker", "gone": "x"}}, "spec": {"taints": []}}
    m = machine({"nodeTemplate": old})
    patch = propagation_patch(m, desired_of(machine_set({"nodeTemplate": NODE_TEMPLATE})))
    assert patch is not None
    assert apply(m, patch)["spec"]["nodeTemplate"] == NODE_TEMPLATE


def test_node_template_removed_when_the_set_has_none() -> None:
    m = machine({"nodeTemplate": NODE_TEMPLATE})
    assert "nodeTemplate" not in apply(m, propagation_patch(m, desired_of(machine_set({}))))["spec"]


def test_configuration_set_changed_and_removed() -> None:
    m = machine({"drainTimeout": "5m", "maxEvictRetries": 3})
    ms = machine_set({"drainTimeout": "10m", "healthTimeout": "2m", "nodeConditions": "KernelDeadlock"})
    spec = apply(m, propagation_patch(m, desired_of(ms)))["spec"]
    assert spec["drainTimeout"] == "10m"
    assert spec["healthTimeout"] == "2m"
    assert spec["nodeConditions"] == "KernelDeadlock"
    assert "maxEvictRetries" not in spec
    assert spec["class"] == {"kind": "MachineClass", "name": "c"}


@pytest.mark.parametrize("phase", ["Failed", "Terminating"])
def test_inactive_machines_get_only_the_class_kind(phase: str) -> None:
    m = machine({"drainTimeout": "5m"}, phase=phase, kind="OldKind")
    patch = propagation_patch(
        m, desired_of(machine_set({"drainTimeout": "10m", "nodeTemplate": NODE_TEMPLATE}))
    )
    assert patch == {"spec": {"class": {"kind": "MachineClass"}}}


def test_class_kind_propagated_to_active_machines_too() -> None:
    m = machine({}, kind="AWSMachineClass")
    assert propagation_patch(m, desired_of(machine_set({}))) == {"spec": {"class": {"kind": "MachineClass"}}}


def test_new_machine_from_template() -> None:
    ms = machine_set(
        {"nodeTemplate": NODE_TEMPLATE, "creationTimeout": "3m"},
        annotations={EFFECTIVE_CREATION_TIMEOUT_ANNOTATION: "7m", "other": "not copied"},
    )
    ms.spec.template.metadata.annotations = {"t": "1"}
    ms.spec.template.metadata.finalizers = ["example.com/f"]
    body = new_machine(ms)
    meta = body["metadata"]
    assert (body["apiVersion"], body["kind"]) == ("machine.sapcloud.io/v1alpha1", "Machine")
    assert meta["generateName"] == "ms-"
    assert "name" not in meta
    assert meta["namespace"] == "ns"
    assert meta["labels"] == {"app": "a"}
    assert meta["annotations"] == {"t": "1", EFFECTIVE_CREATION_TIMEOUT_ANNOTATION: "7m"}
    assert meta["finalizers"] == ["example.com/f", MCM_FINALIZER]
    assert meta["ownerReferences"] == [
        {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "name": "ms", "uid": "uid-ms",
         "controller": True, "blockOwnerDeletion": True}
    ]  # fmt: skip
    assert body["spec"]["nodeTemplate"] == NODE_TEMPLATE
    assert body["spec"]["creationTimeout"] == "3m"
    assert body["spec"]["class"] == {"kind": "MachineClass", "name": "c"}


def test_a_new_machine_carries_the_mcm_finalizer_from_its_creation() -> None:
    """No finalizer patch by the machine controller's first pass: one API write less per machine
    (a behaviour change: upstream's machine controller adds it, ``addMachineFinalizers``)."""
    assert new_machine(machine_set({}))["metadata"]["finalizers"] == [MCM_FINALIZER]
    ms = machine_set({})
    ms.spec.template.metadata.finalizers = [MCM_FINALIZER, "example.com/f"]
    assert new_machine(ms)["metadata"]["finalizers"] == [MCM_FINALIZER, "example.com/f"]
