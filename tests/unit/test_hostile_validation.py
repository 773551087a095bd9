"""Hostile content in validation and parsing (issue 13, item 6): unknown selector operators, rollout
parameters upstream refuses, quantities that are not, unreadable objects, and messages that stay short
and carry no values."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mcm_sandbox.testing import fixtures as fx
from mcm_tasks import kinds
from mcm_tasks.api import LabelSelector, Machine, MachineClass, MachineDeployment, MachineSet
from mcm_tasks.api.validation import (
    ErrorType,
    parse_problem,
    validate_label_selector,
    validate_machine,
    validate_machine_class,
    validate_machine_deployment,
    validate_machine_set,
)
from mcm_tasks.cache import layout
from mcm_tasks.cache.models import MAX_DEPTH, ParsedCache, Unreadable, parse_object, parser, too_deep


def selector(*requirements: dict[str, Any]) -> LabelSelector:
    return LabelSelector.model_validate({"matchExpressions": list(requirements)})


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        ({"key": "a", "operator": "In", "values": ["x"]}, []),
        ({"key": "a", "operator": "Exists"}, []),
        ({"key": "a", "operator": "Near", "values": ["x"]},
         [("spec.selector.matchExpressions[0].operator", ErrorType.INVALID)]),
        ({"key": "a", "operator": "In"}, [("spec.selector.matchExpressions[0].values", ErrorType.REQUIRED)]),
        ({"key": "a", "operator": "NotIn", "values": []},
         [("spec.selector.matchExpressions[0].values", ErrorType.REQUIRED)]),
        ({"key": "a", "operator": "DoesNotExist", "values": ["x"]},
         [("spec.selector.matchExpressions[0].values", ErrorType.FORBIDDEN)]),
    ],
)  # fmt: skip
def test_label_selector_operators(requirement: dict[str, Any], expected: list[tuple[str, ErrorType]]) -> None:
    assert [(e.field, e.type) for e in validate_label_selector(selector(requirement))] == expected


def near_set() -> MachineSet:
    obj = fx.machine_set("s", selector={"app": "x"})
    obj["spec"]["selector"]["matchExpressions"] = [{"key": "app", "operator": "Near", "values": ["x"]}]
    obj["spec"]["template"] = {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"class": {"kind": "MachineClass", "name": "c"}},
    }
    return MachineSet.model_validate(obj)


def test_a_set_with_an_unknown_operator_is_invalid_instead_of_raising() -> None:
    errors = validate_machine_set(near_set())
    assert [e.field for e in errors] == ["spec.selector.matchExpressions[0].operator"]
    assert "'Near' is not a valid selector operator" in str(errors[0])


def deployment(rolling: dict[str, Any]) -> MachineDeployment:
    obj = fx.machine_deployment("d", selector={"app": "d"})
    obj["spec"]["template"]["metadata"] = {"labels": {"app": "d"}}
    obj["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": rolling}
    return MachineDeployment.model_validate(obj)


def test_a_huge_value_is_quoted_short() -> None:
    errors = validate_machine_deployment(deployment({"maxSurge": "x" * 100_000, "maxUnavailable": 1}))
    assert len(errors) == 1 and len(str(errors[0])) < 400


def machine_class(capacity: dict[str, Any]) -> MachineClass:
    obj = fx.machine_class("c")
    obj["nodeTemplate"] = {"capacity": capacity, "instanceType": "t", "region": "r", "zone": "z"}
    return MachineClass.model_validate(obj)


@pytest.mark.parametrize("bad", ["lots", "-", "12.5.6Gi", "\u2603"])
def test_node_template_capacity_must_be_quantities(bad: str) -> None:
    errors = validate_machine_class(machine_class({"cpu": bad, "memory": "1Gi", "gpu": 0}))
    assert [e.field for e in errors] == ["nodeTemplate.capacity.cpu"]
    assert validate_machine_class(machine_class({"cpu": "500m", "memory": "1Gi", "gpu": 0})) == []


def test_parse_problem_names_fields_and_never_values() -> None:
    obj = fx.machine_set("s")
    obj["spec"]["replicas"] = "s3cr3t-value"
    with pytest.raises(Unreadable) as caught:
        parse_object(MachineSet, obj)
    assert "spec.replicas" in caught.value.problem
    assert "s3cr3t" not in str(caught.value)
    assert caught.value.identity["metadata"]["name"] == "s"
    assert parse_problem(ValueError("x" * 10_000)).__len__() <= 600


def test_the_parsed_cache_leaves_unreadable_objects_out_of_lists() -> None:
    good, bad = fx.machine_set("good"), fx.machine_set("bad")
    bad["spec"]["replicas"] = "many"
    items = [(layout.object_key(fx.NS, o["metadata"]["name"]), orjson.dumps(o)) for o in (good, bad)]
    parse = parser(MachineSet)
    assert parser(MachineSet) is parse  # one function per model: the cache's tables are keyed by it
    cache = ParsedCache()
    assert [m.metadata.name for m in cache.some(kinds.MACHINE_SET.mirror, parse, items)] == ["good"]
    with pytest.raises(Unreadable):
        cache.one(kinds.MACHINE_SET.mirror, parse, *items[1])


def test_content_nested_deeper_than_a_model_can_be_written_back_is_unreadable() -> None:
    obj = fx.machine_class("c")
    value: Any = "leaf"
    for _ in range(MAX_DEPTH + 1):
        value = {"a": value}
    obj["providerSpec"] = value
    assert not too_deep(fx.machine_class("c"))
    with pytest.raises(Unreadable) as caught:
        parse_object(MachineClass, obj)
    assert caught.value.problem == f"nested deeper than {MAX_DEPTH} levels"


def test_a_class_name_no_object_can_have_is_invalid_and_not_quoted() -> None:
    obj = fx.machine("m")
    obj["spec"]["class"]["name"] = "c" * 100_000
    errors = validate_machine(Machine.model_validate(obj))
    assert [e.field for e in errors] == ["spec.class.name"] and len(str(errors[0])) < 100
