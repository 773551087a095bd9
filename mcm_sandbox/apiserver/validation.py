"""Checks kube-apiserver makes on built-in objects that a client can trip over.

- Decoding: a built-in body is decoded into its Go struct, so a value of the wrong JSON type is a
  400 (``json: cannot unmarshal string into Go struct field ...``) and an unknown field is dropped,
  reported as a warning, or (``fieldValidation=Strict``, kubectl's default) refused with 400
  ``strict decoding error: unknown field "spec.foo"``. The shapes are kube's published definitions.
- Metadata: label keys and values, annotation keys (``ValidateObjectMeta``).
- Immutability: ConfigMaps and Secrets marked ``immutable``, and a Pod's spec beyond the few fields
  upstream lets an update change.
"""

from __future__ import annotations

import json
from typing import Any

from mcm_sandbox.apiserver import errors, kube_openapi
from mcm_sandbox.apiserver.resources import ResourceType

Obj = dict[str, Any]
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}


def _resolve(node: Any) -> Obj:
    while isinstance(node, dict):
        name = kube_openapi.ref_name(node)
        if name is None:
            return node
        node = kube_openapi.definitions().get(name) or {"x-kubernetes-preserve-unknown-fields": True}
    return {}


def _types(node: Obj) -> set[str]:
    kind = node.get("type")
    found = set(kind) if isinstance(kind, list) else {kind} if kind else set()
    for option in node.get("oneOf") or []:
        found |= _types(option)
    return found - {"null"}


def _go_type(node: Obj) -> str:
    types = _types(node)
    if types == {"integer"}:
        return {"int32": "int32", "int64": "int64"}.get(str(node.get("format")), "int")
    if types == {"number"}:
        return "float64"
    if types == {"boolean"}:
        return "bool"
    if types == {"string"}:
        return "string"
    if types == {"array"}:
        return "[]" + _go_type(_resolve(node.get("items") or {}))
    return "map[string]interface {}" if "object" in types else "interface {}"


def _fits(value: Any, node: Obj) -> bool:
    types = _types(node)
    if not types or value is None:
        return True
    if isinstance(value, bool):
        return "boolean" in types
    if isinstance(value, int):
        return bool(types & {"integer", "number"})
    if isinstance(value, float):
        return "number" in types or ("integer" in types and value.is_integer())
    if isinstance(value, str):
        return "string" in types
    if isinstance(value, list):
        return "array" in types
    return "object" in types


class _Walker:
    def __init__(self, struct: str) -> None:
        self.unknown: list[str] = []
        self.type_error = ""
        self.struct = struct

    def walk(self, value: Any, node: Obj, path: str, struct: str, prune: bool) -> None:
        if self.type_error:
            return
        if not _fits(value, node):
            json_type = _JSON_TYPES.get(type(value), "value")
            where = f"{struct}.{path}"
            self.type_error = (
                f"json: cannot unmarshal {json_type} into Go struct field {where} of type {_go_type(node)}"
            )
            return
        if isinstance(value, dict):
            props = node.get("properties")
            extra = node.get("additionalProperties")
            if props is None:
                if isinstance(extra, dict):
                    item = _resolve(extra)
                    for key, child in value.items():
                        self.walk(child, item, f"{path}[{key}]" if path else key, struct, prune)
                return
            for key in list(value):
                child_path = f"{path}.{key}" if path else key
                if key not in props:
                    if node.get("x-kubernetes-preserve-unknown-fields"):
                        continue
                    self.unknown.append(child_path)
                    if prune:
                        del value[key]
                    continue
                ref = kube_openapi.ref_name(props[key]) or kube_openapi.ref_name(
                    props[key].get("items") or {}
                )
                child_struct = ref.rsplit(".", 1)[-1] if ref else struct
                self.walk(
                    value[key], _resolve(props[key]), child_path, child_struct if ref else struct, prune
                )
        elif isinstance(value, list):
            item = _resolve(node.get("items") or {})
            for index, child in enumerate(value):
                self.walk(child, item, f"{path}[{index}]", struct, prune)


def decode_check(rt: ResourceType, body: Obj, field_validation: str) -> list[str]:
    """Type errors (400) and unknown fields of a built-in body: pruned, refused when Strict.

    Returns the warnings (``unknown field "x"``) for the Warning header when not Strict.
    """
    if rt.crd or rt.view:
        return []
    name = kube_openapi.definition_name(rt.group, rt.version, rt.kind)
    if name is None:
        return []
    struct = name.rsplit(".", 1)[-1]
    walker = _Walker(struct)
    strict = field_validation == "Strict"
    walker.walk(body, _resolve({"$ref": kube_openapi.REF_PREFIX + name}), "", struct, prune=not strict)
    if walker.type_error:
        raise errors.bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {walker.type_error}'
        )
    unknown = [u for u in walker.unknown if u not in ("metadata.resourceVersion",)]
    if strict and unknown:
        if len(unknown) == 1:
            raise errors.bad_request(f'strict decoding error: unknown field "{unknown[0]}"')
        raise errors.bad_request(
            "strict decoding error: " + ", ".join(f'unknown field "{u}"' for u in unknown)
        )
    if field_validation == "Ignore":
        return []
    return [f'unknown field "{u}"' for u in unknown]


# --- metadata ----------------------------------------------------------------------------------


def metadata_causes(meta: Obj) -> list[dict[str, str]]:
    from mcm_sandbox import selectors

    causes: list[dict[str, str]] = []
    for key, value in (meta.get("labels") or {}).items():
        try:
            selectors._check_key(str(key))
        except selectors.SelectorError as exc:
            causes.append(errors.cause("metadata.labels", f"Invalid value: {_q(key)}: {_detail(exc)}"))
        if not isinstance(value, str):
            continue
        try:
            selectors._check_value(value)
        except selectors.SelectorError as exc:
            causes.append(errors.cause("metadata.labels", f"Invalid value: {_q(value)}: {_detail(exc)}"))
    for key in meta.get("annotations") or {}:
        try:
            selectors._check_key(str(key))
        except selectors.SelectorError as exc:
            causes.append(errors.cause("metadata.annotations", f"Invalid value: {_q(key)}: {_detail(exc)}"))
    return causes


def _q(text: str) -> str:
    return json.dumps(text)  # Go's %q for plain strings


def _detail(exc: Exception) -> str:
    """The reason part of a selector error ("name part must consist of ...")."""
    text = str(exc)
    marker = text.find("Invalid value: ")
    rest = text[marker + len("Invalid value: ") :] if marker >= 0 else text
    return rest.split(": ", 1)[1] if ": " in rest else rest


# --- immutability ------------------------------------------------------------------------------

_POD_MUTABLE = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates")
POD_SPEC_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _pod_spec_shape(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    out = {k: v for k, v in spec.items() if k not in _POD_MUTABLE}
    for key in ("containers", "initContainers"):
        if isinstance(out.get(key), list):
            out[key] = [
                {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c for c in out[key]
            ]
    return out


def immutability_causes(rt: ResourceType, old: Obj, new: Obj) -> list[dict[str, str]]:
    if rt.crd or rt.group:
        return []
    if rt.storage in ("configmaps", "secrets") and old.get("immutable") is True:
        causes = []
        for field in ("data", "binaryData") if rt.storage == "configmaps" else ("data",):
            if (old.get(field) or {}) != (new.get(field) or {}):
                causes.append(
                    errors.cause(
                        field, "Forbidden: field is immutable when `immutable` is set", "FieldValueForbidden"
                    )
                )
        if new.get("immutable") is not True:
            causes.append(
                errors.cause(
                    "immutable",
                    "Forbidden: field is immutable when `immutable` is set",
                    "FieldValueForbidden",
                )
            )
        return causes
    if rt.storage == "pods":
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        if _pod_spec_shape(old_spec) != _pod_spec_shape(new_spec):
            return [errors.cause("spec", f"Forbidden: {POD_SPEC_FORBIDDEN}", "FieldValueForbidden")]
    return []
