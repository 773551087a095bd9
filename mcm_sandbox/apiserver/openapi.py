"""A minimal OpenAPI v3 discovery: just enough for kubectl to see that every type accepts the
``fieldValidation`` parameter, so it leaves validation to the server instead of downloading schemas.
"""

from __future__ import annotations

from typing import Any

from mcm_sandbox.apiserver.resources import Registry, ResourceType

_FIELD_VALIDATION = {
    "name": "fieldValidation",
    "in": "query",
    "schema": {"type": "string", "uniqueItems": True},
}


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def index(registry: Registry) -> dict[str, Any]:
    paths = {}
    for rt in registry.all():
        key = _gv_path(rt.group, rt.version)
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}"}
    return {"paths": paths}


def _item_path(rt: ResourceType) -> str:
    base = "/" + _gv_path(rt.group, rt.version)
    scope = "/namespaces/{namespace}" if rt.namespaced else ""
    return f"{base}{scope}/{rt.plural}/{{name}}"


def group_version(registry: Registry, gv_path: str) -> dict[str, Any] | None:
    types = [rt for rt in registry.all() if _gv_path(rt.group, rt.version) == gv_path.strip("/")]
    if not types:
        return None
    paths: dict[str, Any] = {}
    for rt in types:
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        operation = {
            "operationId": f"patch{rt.kind}",
            "parameters": [_FIELD_VALIDATION],
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
        }
        paths[_item_path(rt)] = {"patch": operation}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }
