"""Structural OpenAPI v3 schemas of apiextensions.k8s.io/v1 CRDs: validation, pruning, defaulting.

A custom resource is pruned, defaulted and then validated on every write, in that order, so a
controller sees the same 422 causes and the same dropped fields as against a real cluster. Causes
use kube's ``field.Error`` vocabulary (the StatusCause ``reason``) and ``ErrorBody`` wording.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import math
import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

_RESOURCE_ROOT_FIELDS = ("apiVersion", "kind", "metadata")
_TYPES = ("array", "boolean", "integer", "number", "object", "string")


@dataclass(frozen=True)
class Cause:
    """One StatusCause: ``reason`` is kube's ErrorType (FieldValueInvalid …), ``field`` its path."""

    reason: str
    message: str
    field: str

    def to_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def format_invalid(qualified_kind: str, name: str, causes: list[Cause]) -> str:
    """The Status message of a 422 Invalid, e.g. ``Machine.machine.sapcloud.io "m" is invalid: …``."""
    errors = [str(cause) for cause in causes]
    joined = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return f'{qualified_kind} "{name}" is invalid: {joined}'


def _go_value(value: Any) -> str:
    """How ErrorBody prints a bad value: strings quoted, scalars plain, the rest as JSON."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _has_type(value: Any, wanted: str) -> bool:
    actual = _json_type(value)
    return actual == wanted or (wanted == "number" and actual == "integer")


class _Validator:
    def __init__(self) -> None:
        self.causes: list[Cause] = []

    def add(self, reason: str, path: str, body: str) -> None:
        self.causes.append(Cause(reason, body, path))

    def invalid(self, path: str, value: Any, detail: str) -> None:
        where = path or "body"
        self.add("FieldValueInvalid", path, f"Invalid value: {_go_value(value)}: {where} in body {detail}")

    def check(self, value: Any, schema: dict[str, Any], path: str, root: bool = False) -> None:
        if value is None:
            if not schema.get("nullable") and (
                schema.get("type") or schema.get("x-kubernetes-int-or-string")
            ):
                self.type_error(path, value, schema)
            return
        if not self.check_type(value, schema, path):
            return
        if "enum" in schema and value not in schema["enum"]:
            supported = ", ".join(_go_value(v) for v in schema["enum"])
            self.add(
                "FieldValueNotSupported",
                path,
                f"Unsupported value: {_go_value(value)}: supported values: {supported}",
            )
        if isinstance(value, int | float) and not isinstance(value, bool):
            self.check_number(value, schema, path)
        elif isinstance(value, str):
            self.check_string(value, schema, path)
        elif isinstance(value, list):
            self.check_array(value, schema, path)
        elif isinstance(value, dict):
            self.check_object(value, schema, path, root)
        self.check_junctors(value, schema, path)

    def type_error(self, path: str, value: Any, schema: dict[str, Any]) -> None:
        wanted = "integer,string" if schema.get("x-kubernetes-int-or-string") else schema.get("type")
        actual = _json_type(value)
        where = path or "body"
        self.add(
            "FieldValueTypeInvalid",
            path,
            f'Invalid value: "{actual}": {where} in body must be of type {wanted}: "{actual}"',
        )

    def check_type(self, value: Any, schema: dict[str, Any], path: str) -> bool:
        if schema.get("x-kubernetes-int-or-string"):
            ok = _json_type(value) in ("integer", "string")
        elif schema.get("type"):
            ok = _has_type(value, schema["type"])
        else:
            return True
        if not ok:
            self.type_error(path, value, schema)
        return ok

    def check_number(self, value: float, schema: dict[str, Any], path: str) -> None:
        if "minimum" in schema:
            low = schema["minimum"]
            if schema.get("exclusiveMinimum") and value <= low:
                self.invalid(path, value, f"should be greater than {low}")
            elif value < low:
                self.invalid(path, value, f"should be greater than or equal to {low}")
        if "maximum" in schema:
            high = schema["maximum"]
            if schema.get("exclusiveMaximum") and value >= high:
                self.invalid(path, value, f"should be less than {high}")
            elif value > high:
                self.invalid(path, value, f"should be less than or equal to {high}")
        factor = schema.get("multipleOf")
        if factor and not math.isclose(value / factor, round(value / factor)):
            self.invalid(path, value, f"should be a multiple of {factor}")
        bits = {"int32": 31, "int64": 63}.get(schema.get("format", ""))
        if bits and _json_type(value) == "integer" and not -(2**bits) <= value < 2**bits:
            self.invalid(path, value, f"must be of type {schema['format']}: {_go_value(value)}")

    def check_string(self, value: str, schema: dict[str, Any], path: str) -> None:
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            self.add("FieldValueTooLong", path, f"Too long: may not be longer than {schema['maxLength']}")
        if "minLength" in schema and len(value) < schema["minLength"]:
            self.invalid(path, value, f"should be at least {schema['minLength']} chars long")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            self.invalid(path, value, f"should match '{schema['pattern']}'")
        fmt = schema.get("format")
        if fmt in _FORMATS and not _FORMATS[fmt](value):
            self.invalid(path, value, f"must be of type {fmt}: {_go_value(value)}")

    def check_array(self, value: list[Any], schema: dict[str, Any], path: str) -> None:
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            self.add(
                "FieldValueTooMany",
                path,
                f"Too many: {len(value)}: must have at most {schema['maxItems']} items",
            )
        if "minItems" in schema and len(value) < schema["minItems"]:
            self.invalid(path, value, f"should have at least {schema['minItems']} items")
        if schema.get("uniqueItems"):
            seen: list[Any] = []
            for item in value:
                if item in seen:
                    self.add("FieldValueDuplicate", path, f"Duplicate value: {_go_value(item)}")
                seen.append(item)
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                self.check(item, items, f"{path}[{index}]")

    def check_object(self, value: dict[str, Any], schema: dict[str, Any], path: str, root: bool) -> None:
        properties: dict[str, Any] = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                self.add("FieldValueRequired", _child(path, name), "Required value")
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            self.add(
                "FieldValueTooMany",
                path,
                f"Too many: {len(value)}: must have at most {schema['maxProperties']} items",
            )
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            self.invalid(path, value, f"should have at least {schema['minProperties']} properties")
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        if embedded:
            for name in ("apiVersion", "kind"):
                if not value.get(name):
                    self.add("FieldValueRequired", _child(path, name), "Required value: must not be empty")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                self.check(item, properties[key], _child(path, key))
            elif (root or embedded) and key in _RESOURCE_ROOT_FIELDS:
                continue
            elif isinstance(extra, dict):
                self.check(item, extra, f"{path}[{key}]")
            elif extra is False and not schema.get("x-kubernetes-preserve-unknown-fields"):
                self.invalid(_child(path, key), key, "is a forbidden property")

    def check_junctors(self, value: Any, schema: dict[str, Any], path: str) -> None:
        for sub in schema.get("allOf") or []:
            self.check(value, sub, path)
        for keyword, wanted in (("anyOf", "at least one"), ("oneOf", "one and only one")):
            branches = schema.get(keyword)
            if not branches:
                continue
            passing = sum(1 for sub in branches if not validate(value, sub, path))
            if passing == 0 or (keyword == "oneOf" and passing > 1):
                self.invalid(path, value, f"must validate {wanted} schema ({keyword})")
        if isinstance(schema.get("not"), dict) and not validate(value, schema["not"], path):
            self.invalid(path, value, "must not validate the schema (not)")


def _is_date_time(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        return False
    return "T" in text.upper()


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _is_byte(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


_FORMATS = {"date-time": _is_date_time, "date": _is_date, "byte": _is_byte}


def validate(obj: Any, schema: dict[str, Any], path: str = "") -> list[Cause]:
    """Every violation of ``schema`` in ``obj``. At the root, apiVersion/kind/metadata are exempt
    from unknown-field checks (the API server validates them itself)."""
    validator = _Validator()
    validator.check(obj, schema, path, root=not path)
    return validator.causes


# ------------------------------------------------------------------------------------ pruning


def prune(obj: Any, schema: dict[str, Any]) -> Any:
    """A copy of ``obj`` without the fields the schema does not specify (kube's structural pruning)."""
    return prune_with_report(obj, schema)[0]


def prune_with_report(obj: Any, schema: dict[str, Any]) -> tuple[Any, list[str]]:
    """As ``prune``, plus the paths removed (the server may warn "unknown field" about them)."""
    removed: list[str] = []
    return _prune(copy.deepcopy(obj), schema, "", True, removed), removed


def _prune(value: Any, schema: dict[str, Any] | None, path: str, root: bool, removed: list[str]) -> Any:
    if not isinstance(schema, dict):
        return value
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            return [_prune(item, items, f"{path}[{i}]", False, removed) for i, item in enumerate(value)]
        return value
    if not isinstance(value, dict):
        return value
    properties: dict[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
    resource_like = root or bool(schema.get("x-kubernetes-embedded-resource"))
    out: dict[str, Any] = {}
    for key, item in value.items():
        child = _child(path, key)
        if resource_like and key in _RESOURCE_ROOT_FIELDS:
            out[key] = item
        elif key in properties:
            sub = properties[key]
            if item is None and not sub.get("nullable") and "default" not in sub:
                removed.append(child)  # non-nullable nulls are dropped, not rejected
                continue
            out[key] = _prune(item, sub, child, False, removed)
        elif isinstance(extra, dict):
            out[key] = _prune(item, extra, f"{path}[{key}]", False, removed)
        elif keep_unknown:
            out[key] = item
        else:
            removed.append(child)
    return out


# ------------------------------------------------------------------------------------ defaulting


def apply_defaults(obj: Any, schema: dict[str, Any]) -> Any:
    """A copy of ``obj`` with ``default`` values filled in for absent (or null non-nullable) fields."""
    return _default(copy.deepcopy(obj), schema)


def _default(value: Any, schema: Any) -> Any:
    if not isinstance(schema, dict):
        return value
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_default(item, schema["items"]) for item in value]
    if not isinstance(value, dict):
        return value
    properties: dict[str, Any] = schema.get("properties") or {}
    for key, sub in properties.items():
        if not isinstance(sub, dict):
            continue
        missing = key not in value or (value[key] is None and not sub.get("nullable"))
        if missing and "default" in sub:
            value[key] = copy.deepcopy(sub["default"])
        if key in value:
            value[key] = _default(value[key], sub)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key in [k for k in value if k not in properties]:
            value[key] = _default(value[key], extra)
    return value


# ------------------------------------------------------------------------------------ structure


def check_structural(schema: Any, path: str = "openAPIV3Schema") -> list[str]:
    """The structural-schema rules a CRD must pass (a useful subset), as kube's field errors."""
    if not isinstance(schema, dict):
        return [f"{path}: Required value: must be an object"]
    problems: list[str] = []
    if schema.get("type") != "object":
        if not schema.get("type"):
            problems.append(f"{path}.type: Required value: must not be empty at the root")
        else:
            problems.append(f'{path}.type: Invalid value: "{schema["type"]}": must be object at the root')
    _check_node(schema, path, problems)
    return problems


def _check_node(node: dict[str, Any], path: str, problems: list[str]) -> None:
    kind = node.get("type")
    lenient = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    if not kind and not lenient:
        problems.append(f"{path}.type: Required value: must not be empty for specified object fields")
    elif kind and kind not in _TYPES:
        supported = ", ".join(f'"{t}"' for t in _TYPES)
        problems.append(f'{path}.type: Unsupported value: "{kind}": supported values: {supported}')
    if kind == "array" and not isinstance(node.get("items"), dict):
        problems.append(f"{path}.items: Required value: must be specified")
    extra = node.get("additionalProperties")
    if node.get("properties") and extra not in (None, False):
        problems.append(
            f"{path}.additionalProperties: Forbidden: "
            "additionalProperties and properties are mutual exclusive"
        )
    if "pattern" in node:
        try:
            re.compile(node["pattern"])
        except (re.error, TypeError):
            problems.append(
                f"{path}.pattern: Invalid value: {_go_value(node['pattern'])}: "
                "must be a valid regular expression"
            )
    for name, sub in (node.get("properties") or {}).items():
        if isinstance(sub, dict):
            _check_node(sub, f"{path}.properties[{name}]", problems)
        else:
            problems.append(f"{path}.properties[{name}]: Invalid value: must be a schema object")
    if isinstance(extra, dict):
        _check_node(extra, f"{path}.additionalProperties", problems)
    if isinstance(node.get("items"), dict):
        _check_node(node["items"], f"{path}.items", problems)
