"""The API models read and write upstream manifests losslessly and give controllers typed access."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from mcm_tasks.api import (
    Machine,
    MachineClass,
    MachineDeployment,
    MachineDeploymentCondition,
    MachineList,
    MachinePhase,
    MachineSet,
    MachineSetCondition,
    MachineSetConditionType,
    MachineSetList,
    MachineState,
    ObjectMeta,
    TaintEffect,
    dump,
    get_condition,
    model_for,
    model_for_plural,
    new_controller_ref,
    parse,
    remove_condition,
    set_condition,
)
from mcm_tasks.api.constants import MCM_FINALIZER
from mcm_tasks.api.meta import LabelSelector, LabelSelectorRequirement

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
ALL_MANIFESTS = sorted(MANIFESTS.glob("*.yaml"))


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((MANIFESTS / name).read_text())
    return data


# --- lossless round trip ---


def test_there_is_a_manifest_of_every_kind_and_strategy() -> None:
    kinds = [load(p.name)["kind"] for p in ALL_MANIFESTS]
    assert {"Machine", "MachineSet", "MachineDeployment", "MachineClass"} <= set(kinds)
    strategies = {
        load(p.name)["spec"]["strategy"]["type"] for p in ALL_MANIFESTS if "machinedeployment" in p.name
    }
    assert strategies == {"RollingUpdate", "Recreate"}


@pytest.mark.parametrize("path", ALL_MANIFESTS, ids=lambda p: p.name)
def test_manifest_round_trips_unchanged(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    obj = parse(data)
    assert type(obj).__name__ == data["kind"]
    assert dump(obj) == data


@pytest.mark.parametrize("path", ALL_MANIFESTS, ids=lambda p: p.name)
def test_round_trip_survives_a_second_pass_and_from_api(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    model = model_for(data["kind"])
    once = model.from_api(data).to_api()
    assert model.from_api(once).to_api() == data


def test_unknown_fields_anywhere_are_kept() -> None:
    data = load("machine.yaml")
    data["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update"}]
    data["spec"]["someFutureSpecField"] = {"a": [1, 2]}
    data["status"]["someFutureStatus"] = "x"
    data["status"]["currentStatus"]["newFlag"] = True
    data["spec"]["nodeTemplate"]["spec"]["configSource"] = {"configMap": {"name": "c"}}
    assert dump(Machine.from_api(data)) == data


def test_provider_spec_is_kept_verbatim_including_unknown_fields() -> None:
    data = load("machineclass-aws.yaml")
    machine_class = MachineClass.from_api(data)
    assert machine_class.provider_spec == data["providerSpec"]
    assert machine_class.provider_spec["futureProviderField"] == {"nested": [1, "two", {"enabled": True}]}
    assert machine_class.provider_spec["tags"]["kubernetes.io/cluster/shoot--dev--demo"] == "1"


def test_machine_set_conditions_keep_their_upstream_key() -> None:
    data = load("machineset.yaml")
    machine_set = MachineSet.from_api(data)
    assert machine_set.status.conditions[0].type == MachineSetConditionType.REPLICA_FAILURE
    out = dump(machine_set)
    assert "machineSetCondition" in out["status"] and "conditions" not in out["status"]


def test_explicit_zero_values_are_kept_and_untouched_defaults_are_not_invented() -> None:
    data = {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": {"name": "s"},
        "spec": {"replicas": 0, "minReadySeconds": 0, "template": {"metadata": {"labels": {}}}},
    }
    assert dump(MachineSet.from_api(data)) == data
    bare = {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine", "metadata": {"name": "m"}}
    assert dump(Machine.from_api(bare)) == bare


def test_defaults_filled_by_code_are_written() -> None:
    machine = Machine(metadata=ObjectMeta(name="m", namespace="ns"))
    machine.metadata.labels["node"] = "n1"
    machine.status.current_status.phase = MachinePhase.PENDING
    machine.status.current_status.timeout_active = False  # explicit zero is written too
    machine.spec.provider_id = "local:///a"
    assert dump(machine) == {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": "m", "namespace": "ns", "labels": {"node": "n1"}},
        "spec": {"providerID": "local:///a"},
        "status": {"currentStatus": {"phase": "Pending", "timeoutActive": False}},
    }


def test_removing_the_last_finalizer_writes_an_empty_list() -> None:
    machine = Machine.from_api(load("machine.yaml"))
    assert machine.metadata.remove_finalizer(MCM_FINALIZER)
    assert not machine.metadata.remove_finalizer(MCM_FINALIZER)
    assert dump(machine)["metadata"]["finalizers"] == []
    assert machine.metadata.add_finalizer(MCM_FINALIZER)
    assert not machine.metadata.add_finalizer(MCM_FINALIZER)
    assert machine.metadata.finalizers == [MCM_FINALIZER]


# --- typed access ---


def test_machine_fields_are_typed() -> None:
    machine = Machine.from_api(load("machine.yaml"))
    assert machine.spec.class_.name == "shoot--dev--demo-worker-a-z1-4b7c2"
    assert machine.status.current_status.phase is MachinePhase.RUNNING
    assert machine.status.last_operation.state is MachineState.SUCCESSFUL
    assert machine.status.last_operation.last_update_time == datetime(2024, 5, 6, 7, 5, 1, tzinfo=UTC)
    assert machine.spec.node_template is not None
    assert machine.spec.node_template.spec.taints[0].effect is TaintEffect.NO_SCHEDULE
    assert machine.spec.node_template.metadata.labels["node.kubernetes.io/role"] == "node"
    assert machine.metadata.controller_ref() is not None
    assert machine.key == "shoot--dev--demo/shoot--dev--demo-worker-a-z1-5d8f9-x7k2p"


@pytest.mark.parametrize(
    ("field", "wire", "seconds"),
    [
        ("drain_timeout", "2h", 7200.0),
        ("health_timeout", "10m", 600.0),
        ("creation_timeout", "1h30m0s", 5400.0),
        ("inplace_update_timeout", "90s", 90.0),
        ("machine_preserve_timeout", "96h", 345600.0),
    ],
)
def test_durations_stay_strings_and_read_as_seconds(field: str, wire: str, seconds: float) -> None:
    machine = Machine()
    setattr(machine.spec, field, wire)
    assert getattr(machine.spec, f"{field}_seconds") == seconds
    alias = type(machine.spec).model_fields[field].alias
    assert dump(machine)["spec"][alias] == wire


def test_in_place_update_timeout_uses_upstream_spelling() -> None:
    machine = Machine.from_api({"kind": "Machine", "spec": {"inPlaceUpdateTimeout": "5m"}})
    assert machine.spec.inplace_update_timeout == "5m"
    assert machine.spec.drain_timeout_seconds is None


def test_configuration_extracts_only_the_machine_configuration_fields() -> None:
    spec = Machine.from_api(load("machine.yaml")).spec
    config = spec.configuration()
    assert config.drain_timeout == "2h" and config.max_evict_retries == 360
    assert "providerID" not in dump(config) and "class" not in dump(config)


def test_unknown_enum_values_are_read_and_written_back() -> None:
    data = load("machine.yaml")
    data["status"]["currentStatus"]["phase"] = "SomeFuturePhase"
    data["status"]["lastOperation"]["type"] = "Teleport"
    machine = Machine.from_api(data)
    assert machine.status.current_status.phase == "SomeFuturePhase"
    assert dump(machine) == data


def test_timestamps_are_normalised_to_utc_z() -> None:
    machine = Machine.from_api(
        {"kind": "Machine", "status": {"currentStatus": {"lastUpdateTime": "2024-05-06T09:05:01+02:00"}}}
    )
    assert dump(machine)["status"]["currentStatus"]["lastUpdateTime"] == "2024-05-06T07:05:01Z"


def test_int_or_string_keeps_its_kind() -> None:
    deployment = MachineDeployment.from_api(load("machinedeployment-rolling.yaml"))
    rolling = deployment.spec.strategy.rolling_update
    assert rolling is not None
    assert (rolling.max_surge, rolling.max_unavailable) == (1, "25%")


def test_wrong_types_are_refused() -> None:
    data = load("machineset.yaml")
    data["spec"]["replicas"] = "three"
    with pytest.raises(ValidationError):
        MachineSet.from_api(data)


def test_assignment_is_validated() -> None:
    machine = Machine()
    machine.status.current_status.phase = "Running"
    assert machine.status.current_status.phase is MachinePhase.RUNNING
    with pytest.raises(ValidationError):
        machine.spec.max_evict_retries = "many"  # type: ignore[assignment]


def test_machine_class_needs_a_provider_spec() -> None:
    with pytest.raises(ValidationError):
        MachineClass.from_api({"kind": "MachineClass", "metadata": {"name": "c"}})


# --- lists and dispatch ---


def test_lists_round_trip() -> None:
    items = [load("machine.yaml"), copy.deepcopy(load("machine.yaml"))]
    items[1]["metadata"]["name"] = "other"
    data = {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineList",
            "metadata": {"resourceVersion": "42", "continue": "abc"}, "items": items}  # fmt: skip
    machines = parse(data)
    assert isinstance(machines, MachineList)
    assert [m.metadata.name for m in machines.items][1] == "other"
    assert machines.metadata.continue_ == "abc"
    assert dump(machines) == data
    assert isinstance(parse({"kind": "MachineSetList", "items": []}), MachineSetList)


def test_unknown_kind_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="Pod"):
        parse({"kind": "Pod"})
    assert model_for_plural("machinedeployments") is MachineDeployment
    with pytest.raises(KeyError, match="pods"):
        model_for_plural("pods")


# --- helpers ---


def test_new_controller_ref_points_at_the_owner() -> None:
    owner = MachineSet.from_api(load("machineset.yaml"))
    owner.metadata.uid = "u-1"
    ref = new_controller_ref(owner)
    assert dump(ref) == {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
                         "name": "shoot--dev--demo-worker-a-z1-5d8f9", "uid": "u-1",
                         "controller": True, "blockOwnerDeletion": True}  # fmt: skip


T0 = datetime(2024, 1, 1, tzinfo=UTC)
T1 = datetime(2024, 1, 2, tzinfo=UTC)


def test_set_condition_replaces_by_type_and_keeps_transition_time_when_status_is_unchanged() -> None:
    old = MachineDeploymentCondition(type="Available", status="False", reason="A", last_transition_time=T0)
    other = MachineDeploymentCondition(type="Progressing", status="True", reason="B")
    same_status = MachineDeploymentCondition(
        type="Available", status="False", reason="C", last_transition_time=T1
    )
    result = set_condition([old, other], same_status)
    assert [c.type for c in result] == ["Progressing", "Available"]
    assert result[1].reason == "C" and result[1].last_transition_time == T0
    flipped = MachineDeploymentCondition(type="Available", status="True", reason="C", last_transition_time=T1)
    assert set_condition([old], flipped)[0].last_transition_time == T1


def test_set_condition_with_same_status_and_reason_changes_nothing() -> None:
    old = MachineSetCondition(type="Frozen", status="True", reason="R", message="m1", last_transition_time=T0)
    new = MachineSetCondition(type="Frozen", status="True", reason="R", message="m2", last_transition_time=T1)
    assert set_condition([old], new) == [old]
    assert get_condition([old], "Frozen") is old
    assert get_condition([old], "ReplicaFailure") is None
    assert remove_condition([old], "Frozen") == []


def expression(key: str, operator: str, *values: str) -> LabelSelector:
    return LabelSelector(
        match_expressions=[LabelSelectorRequirement(key=key, operator=operator, values=list(values))]
    )


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        (LabelSelector(), {"a": "1"}, True),
        (LabelSelector(match_labels={"a": "1"}), {"a": "1", "b": "2"}, True),
        (LabelSelector(match_labels={"a": "1"}), {"a": "2"}, False),
        (expression("a", "In", "1", "2"), {"a": "2"}, True),
        (expression("a", "In", "1", "2"), {"b": "2"}, False),
        (expression("a", "NotIn", "1"), {}, True),
        (expression("a", "NotIn", "1"), {"a": "1"}, False),
        (expression("a", "Exists"), {"b": "1"}, False),
        (expression("a", "DoesNotExist"), {"b": "1"}, True),
    ],
)  # fmt: skip
def test_label_selector(selector: LabelSelector, labels: dict[str, str], matches: bool) -> None:
    assert selector.matches(labels) is matches
