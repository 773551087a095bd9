"""MCM's validation functions report every problem with its field path; intstr resolution rounds as
Kubernetes does."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcm_tasks.api import Machine, MachineClass, MachineDeployment, MachineSet, resolve_int_or_percent
from mcm_tasks.api.validation import (
    ErrorType,
    FieldError,
    validate_machine,
    validate_machine_class,
    validate_machine_deployment,
    validate_machine_set,
)

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((MANIFESTS / name).read_text())
    return data


def fields(errors: list[FieldError]) -> list[str]:
    return [e.field for e in errors]


@pytest.mark.parametrize(
    ("name", "validate", "model"),
    [
        ("machine.yaml", validate_machine, Machine),
        ("machineset.yaml", validate_machine_set, MachineSet),
        ("machinedeployment-rolling.yaml", validate_machine_deployment, MachineDeployment),
        ("machinedeployment-recreate.yaml", validate_machine_deployment, MachineDeployment),
        ("machineclass-aws.yaml", validate_machine_class, MachineClass),
        ("machineclass-local.yaml", validate_machine_class, MachineClass),
    ],
)
def test_the_test_manifests_are_valid(
    name: str, validate: Callable[[Any], list[FieldError]], model: Any
) -> None:
    assert validate(model.from_api(load(name))) == []


# --- Machine ---


def test_machine_needs_class_kind_and_name_and_reports_both() -> None:
    errors = validate_machine(Machine.from_api({"kind": "Machine", "spec": {"class": {}}}))
    assert fields(errors) == ["spec.class.kind", "spec.class.name"]
    assert {e.type for e in errors} == {ErrorType.REQUIRED}
    assert str(errors[0]) == "spec.class.kind: Required: Kind is required"


def test_machine_durations_must_parse_and_not_be_negative() -> None:
    data = load("machine.yaml")
    data["spec"].update(drainTimeout="soon", healthTimeout="-1m", inPlaceUpdateTimeout="10x")
    errors = validate_machine(Machine.from_api(data))
    assert fields(errors) == ["spec.drainTimeout", "spec.healthTimeout", "spec.inPlaceUpdateTimeout"]


# --- MachineSet ---


def machine_set(**changes: Any) -> MachineSet:
    data = load("machineset.yaml")
    for path, value in changes.items():
        node = data
        *parents, leaf = path.split("__")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return MachineSet.from_api(data)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"spec__replicas": -1}, ["spec.replicas"]),
        ({"spec__replicas": 0}, []),
        ({"spec__selector": {"matchLabels": {"name": "other", "extra": "x"}}},
         ["spec.selector.matchLabels"]),
        ({"spec__selector": {}}, []),
        ({"spec__template": {"metadata": {"labels": {"name": "shoot--dev--demo-worker-a-z1",
                                                      "machine-template-hash": "5d8f9c7b6"}},
                             "spec": {"class": {"name": "c"}, "drainTimeout": "x"}}},
         ["spec.template.spec.class.kind", "spec.template.spec.drainTimeout"]),
        ({"spec__replicas": -3, "spec__template": {}},
         ["spec.replicas", "spec.selector.matchLabels",
          "spec.template.spec.class.kind", "spec.template.spec.class.name"]),
    ],
)  # fmt: skip
def test_machine_set_validation(changes: dict[str, Any], expected: list[str]) -> None:
    assert fields(validate_machine_set(machine_set(**changes))) == expected


# --- MachineDeployment ---


def deployment(strategy: dict[str, Any] | None, replicas: int = 4, **spec: Any) -> MachineDeployment:
    data = load("machinedeployment-rolling.yaml")
    data["spec"]["replicas"] = replicas
    if strategy is None:
        del data["spec"]["strategy"]
    else:
        data["spec"]["strategy"] = strategy
    data["spec"].update(spec)
    return MachineDeployment.from_api(data)


ROLLING = "RollingUpdate"


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ({"type": ROLLING, "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}, []),
        ({"type": ROLLING, "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "100%"}}, []),
        ({"type": "Recreate"}, []),
        (None, [("spec.strategy.type", ErrorType.INVALID)]),
        ({"type": ""}, [("spec.strategy.type", ErrorType.INVALID)]),
        ({"type": "BlueGreen"}, [("spec.strategy.type", ErrorType.INVALID)]),
        ({"type": ROLLING}, [("spec.strategy.rollingUpdate", ErrorType.REQUIRED)]),
        ({"type": ROLLING, "rollingUpdate": {}},
         [("spec.strategy.rollingUpdate.maxSurge", ErrorType.REQUIRED),
          ("spec.strategy.rollingUpdate.maxUnavailable", ErrorType.REQUIRED)]),
        ({"type": ROLLING, "rollingUpdate": {"maxSurge": "1", "maxUnavailable": "10.5%"}},
         [("spec.strategy.rollingUpdate.maxSurge", ErrorType.REQUIRED),
          ("spec.strategy.rollingUpdate.maxUnavailable", ErrorType.REQUIRED)]),
        ({"type": ROLLING, "rollingUpdate": {"maxSurge": 2**31, "maxUnavailable": 1}},
         [("spec.strategy.rollingUpdate.maxSurge", ErrorType.REQUIRED)]),
        ({"type": "InPlaceUpdate", "inPlaceUpdate": {"maxSurge": 0, "maxUnavailable": 1,
                                                      "orchestrationType": "Auto"}}, []),
        ({"type": "InPlaceUpdate", "inPlaceUpdate": {"maxSurge": 0, "maxUnavailable": "50%",
                                                      "orchestrationType": "Manual"}}, []),
        ({"type": "InPlaceUpdate", "inPlaceUpdate": {"maxSurge": 0, "maxUnavailable": 1,
                                                      "orchestrationType": "Sometimes"}},
         [("spec.strategy.inPlaceUpdate.orchestrationType", ErrorType.INVALID)]),
        ({"type": "InPlaceUpdate", "inPlaceUpdate": {"maxUnavailable": 1}},
         [("spec.strategy.inPlaceUpdate.maxSurge", ErrorType.REQUIRED),
          ("spec.strategy.inPlaceUpdate.orchestrationType", ErrorType.REQUIRED)]),
        ({"type": "InPlaceUpdate"}, [("spec.strategy.inPlaceUpdate", ErrorType.REQUIRED)]),
    ],
)  # fmt: skip
def test_machine_deployment_strategy_validation(
    strategy: dict[str, Any] | None, expected: list[tuple[str, ErrorType]]
) -> None:
    assert [(e.field, e.type) for e in validate_machine_deployment(deployment(strategy))] == expected


def test_machine_deployment_reports_all_problems_at_once() -> None:
    bad = deployment({"type": ROLLING}, replicas=-1, selector={"matchLabels": {"name": "nope"}},
                     template={"metadata": {"labels": {"name": "x"}}, "spec": {}})  # fmt: skip
    assert fields(validate_machine_deployment(bad)) == [
        "spec.replicas",
        "spec.strategy.rollingUpdate",
        "spec.selector.matchLabels",
        "spec.template.spec.class.kind",
        "spec.template.spec.class.name",
    ]


# --- MachineClass ---


def test_machine_class_without_node_template_is_valid() -> None:
    data = load("machineclass-aws.yaml")
    del data["nodeTemplate"]
    assert validate_machine_class(MachineClass.from_api(data)) == []


def test_machine_class_node_template_needs_capacity_keys_and_placement() -> None:
    data = load("machineclass-aws.yaml")
    data["nodeTemplate"] = {"capacity": {"memory": "8Gi"}, "region": "eu-west-1"}
    errors = validate_machine_class(MachineClass.from_api(data))
    assert fields(errors) == [
        "nodeTemplate.capacity.cpu",
        "nodeTemplate.capacity.gpu",
        "nodeTemplate.instanceType",
        "nodeTemplate.zone",
    ]


def test_validation_does_not_touch_the_object() -> None:
    data = load("machinedeployment-rolling.yaml")
    before = copy.deepcopy(data)
    obj = MachineDeployment.from_api(data)
    validate_machine_deployment(obj)
    assert obj.to_api() == before


# --- intstr ---


@pytest.mark.parametrize(
    ("value", "total", "round_up", "expected"),
    [
        (3, 10, True, 3),
        (3, 10, False, 3),
        (0, 10, True, 0),
        ("25%", 10, True, 3),
        ("25%", 10, False, 2),
        ("25%", 4, True, 1),
        ("25%", 4, False, 1),
        ("1%", 1, True, 1),
        ("1%", 1, False, 0),
        ("100%", 7, False, 7),
        ("150%", 4, True, 6),
        ("0%", 9, True, 0),
        ("33%", 3, True, 1),
        ("33%", 3, False, 0),
        ("50%", 0, True, 0),
        ("+10%", 10, True, 1),
    ],
)
def test_resolve_int_or_percent(value: int | str, total: int, round_up: bool, expected: int) -> None:
    assert resolve_int_or_percent(value, total, round_up) == expected


@pytest.mark.parametrize("value", [None, "5", "abc%", "10.5%", " 5%", "%", True])
def test_resolve_int_or_percent_refuses(value: Any) -> None:
    with pytest.raises(ValueError, match="IntOrString"):
        resolve_int_or_percent(value, 10, True)
