"""OpenAPI v3 (per group/version) and v2 documents with schemas, so ``kubectl explain`` works and
kubectl sees that every type accepts the ``fieldValidation`` parameter (it then leaves validation
to the server).

Built-in schemas are kube-apiserver's published definitions (``kube_openapi``), converted back from
JSON Schema to OpenAPI's dialect: ``$ref`` into ``components/schemas`` (v3) or ``definitions`` (v2),
nullable type lists collapsed, a referenced property wrapped in ``allOf`` as kube serves it. Custom
resources get their CRD version's ``openAPIV3Schema`` with ``metadata`` pointing at ObjectMeta.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from mcm_sandbox.apiserver import kube_openapi
from mcm_sandbox.apiserver.resources import Registry, ResourceType
from mcm_sandbox.apiserver.store import dumps

_FIELD_VALIDATION = {
    "name": "fieldValidation",
    "in": "query",
    "schema": {"type": "string", "uniqueItems": True},
}
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_SPECIAL = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
}


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


# --- conversion from the JSON Schema form ----------------------------------------------------


def _convert(schema: Any, ref_base: str, refs: set[str]) -> Any:
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and value.startswith(kube_openapi.REF_PREFIX):
            name = value[len(kube_openapi.REF_PREFIX) :]
            refs.add(name)
            out["$ref"] = ref_base + name
        elif key == "type" and isinstance(value, list):
            kinds = [t for t in value if t != "null"]
            if kinds:
                out["type"] = kinds[0]
        elif key in ("properties", "patternProperties"):
            out[key] = {k: _property(v, ref_base, refs) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = _convert(value, ref_base, refs)
        elif key in ("oneOf", "anyOf", "allOf"):
            out[key] = [_convert(v, ref_base, refs) for v in value]
        elif key not in ("$schema", "$id"):
            out[key] = value
    return out


def _property(schema: Any, ref_base: str, refs: set[str]) -> Any:
    converted = _convert(schema, ref_base, refs)
    if isinstance(converted, dict) and "$ref" in converted and len(converted) > 1:
        ref = converted.pop("$ref")
        converted["allOf"] = [{"$ref": ref}]
    return converted


def _definition(name: str, ref_base: str, refs: set[str]) -> dict[str, Any]:
    if name in _SPECIAL:
        return dict(_SPECIAL[name])
    converted: dict[str, Any] = _convert(kube_openapi.definitions().get(name) or {}, ref_base, refs)
    for prop in ("apiVersion", "kind"):  # the JSON Schema form pins these with an enum; kube does not
        field = (converted.get("properties") or {}).get(prop)
        if isinstance(field, dict):
            field.pop("enum", None)
    return converted


def _closure(roots: list[str], ref_base: str) -> dict[str, Any]:
    """The definitions ``roots`` need, converted, following every reference."""
    out: dict[str, Any] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in out:
            continue
        refs: set[str] = set()
        out[name] = _definition(name, ref_base, refs)
        pending.extend(r for r in refs if r not in out)
    return out


@functools.lru_cache(maxsize=128)
def _builtin_components(group: str, version: str, kinds: tuple[str, ...], ref_base: str) -> dict[str, Any]:
    roots = [n for k in kinds if (n := kube_openapi.definition_name(group, version, k))]
    return _closure([*roots, OBJECT_META], ref_base)


def _crd_schema(rt: ResourceType, ref_base: str) -> tuple[str, dict[str, Any]]:
    reversed_group = ".".join(reversed(rt.group.split(".")))
    name = f"{reversed_group}.{rt.version}.{rt.kind}"
    schema = dict(rt.schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    props = dict(schema.get("properties") or {})
    props.setdefault("apiVersion", {"type": "string", "description": "APIVersion of this object."})
    props.setdefault("kind", {"type": "string", "description": "Kind of this object."})
    props["metadata"] = {
        "allOf": [{"$ref": ref_base + OBJECT_META}],
        "description": "Standard object's metadata.",
    }
    schema["properties"] = props
    schema["x-kubernetes-group-version-kind"] = [{"group": rt.group, "version": rt.version, "kind": rt.kind}]
    return name, schema


def _components(types: list[ResourceType], ref_base: str) -> dict[str, Any]:
    builtins = [rt for rt in types if not rt.crd]
    schemas: dict[str, Any] = {}
    if builtins:
        rt0 = builtins[0]
        schemas.update(
            _builtin_components(rt0.group, rt0.version, tuple(sorted(rt.kind for rt in builtins)), ref_base)
        )
    crds = [rt for rt in types if rt.crd]
    if crds:
        schemas.update(_closure([OBJECT_META], ref_base))
        for rt in crds:
            name, schema = _crd_schema(rt, ref_base)
            schemas[name] = schema
    return schemas


# --- documents -------------------------------------------------------------------------------


def _item_path(rt: ResourceType) -> str:
    base = "/" + _gv_path(rt.group, rt.version)
    scope = "/namespaces/{namespace}" if rt.namespaced else ""
    return f"{base}{scope}/{rt.plural}/{{name}}"


def _paths(types: list[ResourceType]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for rt in types:
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        paths[_item_path(rt)] = {
            "patch": {
                "operationId": f"patch{rt.kind}",
                "parameters": [_FIELD_VALIDATION],
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            }
        }
    return paths


def group_version_bytes(registry: Registry, gv_path: str) -> bytes | None:
    types = [rt for rt in registry.all() if _gv_path(rt.group, rt.version) == gv_path.strip("/")]
    if not types:
        return None
    if any(rt.crd for rt in types):
        return _document(types)
    cached = _STATIC_DOCUMENTS.get(gv_path)  # built-in groups never change while serving
    if cached is None:
        cached = _STATIC_DOCUMENTS[gv_path] = _document(types)
    return cached


_STATIC_DOCUMENTS: dict[str, bytes] = {}


def _document(types: list[ResourceType]) -> bytes:
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": _paths(types),
        "components": {"schemas": _components(types, "#/components/schemas/")},
    }
    return dumps(doc)


def index(registry: Registry) -> dict[str, Any]:
    """/openapi/v3: each group/version's document, with a hash so clients re-fetch after a change."""
    paths: dict[str, Any] = {}
    for key in sorted({_gv_path(rt.group, rt.version) for rt in registry.all()}):
        raw = group_version_bytes(registry, key) or b""
        digest = hashlib.sha512(raw).hexdigest().upper()[:32]
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}


def swagger_v2(registry: Registry) -> bytes:
    """/openapi/v2 as JSON: every definition served, in swagger 2.0's ``definitions``."""
    types = registry.all()
    definitions: dict[str, Any] = {}
    by_gv: dict[tuple[str, str], list[ResourceType]] = {}
    for rt in types:
        by_gv.setdefault((rt.group, rt.version), []).append(rt)
    for gv_types in by_gv.values():
        definitions.update(_components(gv_types, "#/definitions/"))
    doc = {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": {},
        "definitions": definitions,
    }
    return dumps(doc)
