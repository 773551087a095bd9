from __future__ import annotations

from typing import Any

import pytest

from mcm_sandbox.schema import (
    Cause,
    apply_defaults,
    check_structural,
    format_invalid,
    prune,
    prune_with_report,
    validate,
)

INT_OR_STRING = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["replicas"],
            "properties": {
                "replicas": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 100},
                "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1},
                "paused": {"type": "boolean"},
                "mode": {"type": "string", "enum": ["Recreate", "RollingUpdate"]},
                "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
                "created": {"type": "string", "format": "date-time"},
                "maxSurge": INT_OR_STRING,
                "note": {"type": "string", "nullable": True},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "resources": {
                    "type": "object",
                    "additionalProperties": {**INT_OR_STRING, "pattern": "^[0-9]+[a-zA-Z]*$"},
                },
                "providerSpec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "x-kubernetes-preserve-unknown-fields": True,
                },
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id"],
                        "properties": {"id": {"type": "string"}, "size": {"type": "integer"}},
                    },
                },
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


def _obj(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "x.io/v1",
        "kind": "Thing",
        "metadata": {"name": "t"},
        "spec": {"replicas": 1, **spec},
    }


def test_valid_object_has_no_causes() -> None:
    obj = _obj(
        ratio=0.5,
        paused=False,
        mode="Recreate",
        name="abc",
        created="2024-05-01T10:00:00Z",
        maxSurge="25%",
        note=None,
        tags=["a"],
        labels={"x": "y"},
        resources={"cpu": 2, "memory": "1Gi"},
        providerSpec={"anything": {"goes": [1, 2]}},
        template={"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}},
        items=[{"id": "a", "size": 3}],
    )
    assert validate(obj, SCHEMA) == []


@pytest.mark.parametrize(
    ("spec", "reason", "field", "message"),
    [
        (
            {"replicas": "3"},
            "FieldValueTypeInvalid",
            "spec.replicas",
            'Invalid value: "string": spec.replicas in body must be of type integer: "string"',
        ),
        ({"replicas": True}, "FieldValueTypeInvalid", "spec.replicas", None),
        ({"replicas": 1.5}, "FieldValueTypeInvalid", "spec.replicas", None),
        (
            {"replicas": -1},
            "FieldValueInvalid",
            "spec.replicas",
            "Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        ),
        (
            {"replicas": 101},
            "FieldValueInvalid",
            "spec.replicas",
            "Invalid value: 101: spec.replicas in body should be less than or equal to 100",
        ),
        (
            {"ratio": 0},
            "FieldValueInvalid",
            "spec.ratio",
            "Invalid value: 0: spec.ratio in body should be greater than 0",
        ),
        ({"paused": "yes"}, "FieldValueTypeInvalid", "spec.paused", None),
        (
            {"mode": "Other"},
            "FieldValueNotSupported",
            "spec.mode",
            'Unsupported value: "Other": supported values: "Recreate", "RollingUpdate"',
        ),
        (
            {"name": "a"},
            "FieldValueInvalid",
            "spec.name",
            'Invalid value: "a": spec.name in body should be at least 2 chars long',
        ),
        ({"name": "abcdef"}, "FieldValueTooLong", "spec.name", "Too long: may not be longer than 5"),
        (
            {"name": "AB"},
            "FieldValueInvalid",
            "spec.name",
            "Invalid value: \"AB\": spec.name in body should match '^[a-z]+$'",
        ),
        ({"created": "last tuesday"}, "FieldValueInvalid", "spec.created", None),
        ({"maxSurge": 1.5}, "FieldValueTypeInvalid", "spec.maxSurge", None),
        ({"maxSurge": True}, "FieldValueTypeInvalid", "spec.maxSurge", None),
        (
            {"mode": None},
            "FieldValueTypeInvalid",
            "spec.mode",
            'Invalid value: "null": spec.mode in body must be of type string: "null"',
        ),
        ({"tags": []}, "FieldValueInvalid", "spec.tags", None),
        (
            {"tags": ["a", "b", "c"]},
            "FieldValueTooMany",
            "spec.tags",
            "Too many: 3: must have at most 2 items",
        ),
        ({"tags": ["a", 1]}, "FieldValueTypeInvalid", "spec.tags[1]", None),
        ({"labels": {"foo": 1}}, "FieldValueTypeInvalid", "spec.labels[foo]", None),
        ({"resources": {"cpu": "a lot"}}, "FieldValueInvalid", "spec.resources[cpu]", None),
        ({"template": {"metadata": {}}}, "FieldValueRequired", "spec.template.apiVersion", None),
        ({"items": [{"size": 1}]}, "FieldValueRequired", "spec.items[0].id", "Required value"),
        ({"replicas": 2**31}, "FieldValueInvalid", "spec.replicas", None),
    ],
)
def test_each_violation_is_reported_like_kube(
    spec: dict[str, Any], reason: str, field: str, message: str | None
) -> None:
    obj = _obj(**spec)
    causes = [c for c in validate(obj, SCHEMA) if c.field == field]
    assert causes, validate(obj, SCHEMA)
    assert causes[0].reason == reason
    if message is not None:
        assert causes[0].message == message


def test_all_problems_are_returned_at_once() -> None:
    obj = {"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {}, "spec": {"mode": "x", "name": 3}}
    fields = sorted(c.field for c in validate(obj, SCHEMA))
    assert fields == ["spec.mode", "spec.name", "spec.replicas"]


def test_required_missing_cause() -> None:
    causes = validate({"spec": {}}, SCHEMA)
    assert causes == [Cause("FieldValueRequired", "Required value", "spec.replicas")]
    assert causes[0].to_dict() == {
        "reason": "FieldValueRequired",
        "message": "Required value",
        "field": "spec.replicas",
    }


def test_root_type_and_nullable() -> None:
    assert validate([], SCHEMA)[0].reason == "FieldValueTypeInvalid"
    assert validate(_obj(note=None), SCHEMA) == []


def test_additional_properties_false_and_junctors() -> None:
    closed = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    assert [c.field for c in validate({"a": "x", "b": 1}, closed, "spec")] == ["spec.b"]
    any_of = {"type": "string", "anyOf": [{"pattern": "^a"}, {"pattern": "^b"}]}
    assert validate("apple", any_of, "f") == []
    assert "anyOf" in validate("cherry", any_of, "f")[0].message
    one_of = {"type": "integer", "oneOf": [{"minimum": 0}, {"maximum": 10}]}
    assert validate(20, one_of, "f") == []
    assert validate(5, one_of, "f")[0].reason == "FieldValueInvalid"
    not_ = {"type": "string", "not": {"enum": ["forbidden"]}}
    assert validate("ok", not_, "f") == [] and validate("forbidden", not_, "f")


def test_format_invalid_message() -> None:
    one = [Cause("FieldValueRequired", "Required value", "spec.replicas")]
    assert (
        format_invalid("Thing.x.io", "t", one) == 'Thing.x.io "t" is invalid: spec.replicas: Required value'
    )
    two = [*one, Cause("FieldValueRequired", "Required value", "spec.x")]
    assert format_invalid("Thing.x.io", "t", two).endswith(
        "is invalid: [spec.replicas: Required value, spec.x: Required value]"
    )


def test_prune_removes_unknown_fields_but_keeps_preserved_subtrees() -> None:
    obj = _obj(
        unknown=1,
        labels={"free": "form"},
        providerSpec={"any": {"deep": True}},
        template={"apiVersion": "v1", "kind": "Pod", "metadata": {"x": 1}, "whatever": 2},
        items=[{"id": "a", "extra": 1}],
    )
    obj["topLevelJunk"] = True
    obj["metadata"]["annotations"] = {"kept": "as-is"}
    obj["status"] = {"phase": "Ready", "bogus": 1}
    pruned, removed = prune_with_report(obj, SCHEMA)
    assert "unknown" not in pruned["spec"] and "topLevelJunk" not in pruned
    assert pruned["spec"]["labels"] == {"free": "form"}
    assert pruned["spec"]["providerSpec"] == {"any": {"deep": True}}
    assert pruned["spec"]["template"]["whatever"] == 2
    assert pruned["spec"]["items"] == [{"id": "a"}]
    assert pruned["metadata"] == {"name": "t", "annotations": {"kept": "as-is"}}
    assert pruned["status"] == {"phase": "Ready"}
    assert sorted(removed) == ["spec.items[0].extra", "spec.unknown", "status.bogus", "topLevelJunk"]
    assert "unknown" in obj["spec"]


def test_prune_keeps_root_fields_even_if_schema_omits_them() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object"}}}
    obj = {"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n"}, "spec": {"x": 1}, "junk": 1}
    assert prune(obj, schema) == {"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n"}, "spec": {}}


def test_prune_drops_non_nullable_nulls() -> None:
    pruned = prune(_obj(mode=None, note=None), SCHEMA)
    assert "mode" not in pruned["spec"] and pruned["spec"]["note"] is None


def test_root_preserve_unknown_fields_keeps_everything() -> None:
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    obj = {"kind": "K", "spec": {"a": 1}, "other": [1]}
    assert prune(obj, schema) == obj


def test_apply_defaults() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "default": {},
                "properties": {
                    "replicas": {"type": "integer", "default": 1},
                    "strategy": {
                        "type": "object",
                        "properties": {"type": {"type": "string", "default": "Rolling"}},
                    },
                    "items": {
                        "type": "array",
                        "items": {"type": "object", "properties": {"w": {"default": 5}}},
                    },
                },
            }
        },
    }
    assert apply_defaults({}, schema) == {"spec": {"replicas": 1}}
    filled = apply_defaults({"spec": {"replicas": None, "strategy": {}, "items": [{}, {"w": 2}]}}, schema)
    assert filled == {"spec": {"replicas": 1, "strategy": {"type": "Rolling"}, "items": [{"w": 5}, {"w": 2}]}}
    assert apply_defaults({"spec": {"replicas": 3}}, schema)["spec"]["replicas"] == 3


def test_check_structural() -> None:
    assert check_structural(SCHEMA) == []
    problems = check_structural(
        {
            "type": "object",
            "properties": {
                "untyped": {},
                "list": {"type": "array"},
                "weird": {"type": "map"},
                "both": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}},
                    "additionalProperties": {},
                },
                "badPattern": {"type": "string", "pattern": "("},
            },
        }
    )
    assert len(problems) == 6, problems
    assert "openAPIV3Schema.properties[untyped].type: Required value" in problems[0]
    assert check_structural({"properties": {}})[0].startswith("openAPIV3Schema.type: Required value")
    assert "must be object at the root" in check_structural({"type": "string"})[0]
    assert check_structural("nonsense")
