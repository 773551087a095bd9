"""The three PATCH flavours of the API server, applied to objects stored as plain JSON dicts.

Controllers and the official client send all three: merge patches for metadata, JSON patches with
``test`` ops as optimistic preconditions, and strategic merge patches (kubectl, the client's
default for dict bodies) whose list semantics depend on Go struct tags. The tags reach us through
the published OpenAPI extensions (``merge_keys_for``); every list without one is atomic (replaced),
which is also what kube does for lists without a ``patchStrategy``.

Errors carry the HTTP code and Status reason the real server would answer with.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonpatch
import jsonpointer
import orjson

#: kube-apiserver refuses JSON patches with more operations than this (413).
MAX_JSON_PATCH_OPERATIONS = 10000

_MARKER = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_FROM_PRIMITIVE = "$deleteFromPrimitiveList"
_SET_ELEMENT_ORDER = "$setElementOrder"
_REJECTED_BY_SERVER = "the server rejected our request due to an error in our request"


class PatchError(ValueError):
    """A patch that cannot be applied; ``status_code``/``reason`` are what kube would answer."""

    def __init__(self, status_code: int, message: str, reason: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.reason = reason or _REASONS.get(status_code, "")
        self.detail = detail or message


_REASONS = {400: "BadRequest", 413: "RequestEntityTooLarge", 422: "Invalid", 500: "InternalError"}


def _bad_request(message: str) -> PatchError:
    return PatchError(400, message)


def _unprocessable(detail: str) -> PatchError:
    # kube wraps these in NewGenericServerResponse(422): the Status message is generic and the
    # real cause is lost; we keep it in ``detail`` for logs and tests.
    return PatchError(422, _REJECTED_BY_SERVER, detail=detail)


def _internal(message: str) -> PatchError:
    # Errors kube does not classify reach ErrorToAPIStatus: code 500, empty reason.
    return PatchError(500, message, reason="", detail=message)


# ---------------------------------------------------------------------------------------------
# RFC 7386 JSON merge patch
# ---------------------------------------------------------------------------------------------


def _copy(doc: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a JSON object (an orjson round trip: several times faster than deepcopy, and
    every write of the API server patches a whole object, managedFields included)."""
    copied: dict[str, Any] = orjson.loads(orjson.dumps(doc))
    return copied


def merge_patch(target: dict[str, Any], patch: Any) -> dict[str, Any]:
    """RFC 7386 on a copy of ``target``; a non-object patch is a 400 as for kube's typed objects."""
    if not isinstance(patch, dict):
        raise _bad_request("Invalid JSON Patch")
    return _merge_object(_copy(target) if isinstance(target, dict) else {}, patch)


def _merge_object(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            current = target.get(key)
            target[key] = _merge_object(current if isinstance(current, dict) else {}, value)
        else:
            target[key] = copy.deepcopy(value)
    return target


# ---------------------------------------------------------------------------------------------
# RFC 6902 JSON patch
# ---------------------------------------------------------------------------------------------


def json_patch(target: dict[str, Any], ops: Any) -> dict[str, Any]:
    """RFC 6902 including ``test``; decode errors are 400, failures while applying are 422."""
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise _bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        raise PatchError(
            413,
            "Request entity too large: The allowed maximum operations in a JSON patch is "
            f"{MAX_JSON_PATCH_OPERATIONS}, got {len(ops)}",
        )
    try:
        result = jsonpatch.JsonPatch(ops).apply(target)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError, KeyError) as err:
        raise _unprocessable(str(err) or type(err).__name__) from err
    if not isinstance(result, dict):
        raise _unprocessable("the patched document is not an object")
    return result


# ---------------------------------------------------------------------------------------------
# Strategic merge patch
# ---------------------------------------------------------------------------------------------

#: Sentinel for "merge this list of scalars as a set" (``patchStrategy:"merge"`` without a key).
PRIMITIVE = None

# Kinds served under more than one group/version with the same name resolve to the first listed.
_KIND_API_VERSIONS = {"Event": "v1", "Scale": "autoscaling/v1"}


def merge_keys_for(kind: str, api_version: str = "") -> dict[str, str | None]:
    """Dotted field path (list indices omitted) → merge key, or ``PRIMITIVE`` for scalar sets.

    Read from the published OpenAPI ``x-kubernetes-patch-merge-key``/``-strategy`` extensions of
    the kind's definition (see ``mcm_sandbox.apiserver.kube_openapi``). Paths not in the result
    are atomic lists: a strategic merge patch replaces them, as kube does for lists without a
    ``patchStrategy`` (Node ``spec.taints``, Pod ``spec.tolerations``).
    """
    from mcm_sandbox.apiserver import kube_openapi

    name = _definition(kind, api_version or _KIND_API_VERSIONS.get(kind, ""))
    return dict(kube_openapi.merge_keys(name)) if name else {}


def _definition(kind: str, api_version: str) -> str | None:
    from mcm_sandbox.apiserver import kube_openapi

    if api_version:
        group, _, version = api_version.rpartition("/")
        return kube_openapi.definition_name(group, version, kind)
    for group, version in (("", "v1"), ("apps", "v1"), ("batch", "v1"), ("policy", "v1")):
        found = kube_openapi.definition_name(group, version, kind)
        if found:
            return found
    return None


def strategic_merge_patch(
    target: dict[str, Any], patch: Any, kind: str, api_version: str = ""
) -> dict[str, Any]:
    """Apply a strategic merge patch for built-in ``kind`` to a copy of ``target``."""
    if not isinstance(patch, dict):
        raise _bad_request("invalid JSON document")
    merger = _StrategicMerger(merge_keys_for(kind, api_version or str(target.get("apiVersion") or "")))
    return merger.merge_map(_copy(target), copy.deepcopy(patch), "")


class _StrategicMerger:
    def __init__(self, keys: dict[str, str | None]) -> None:
        self.keys = keys

    def merge_map(self, original: dict[str, Any], patch: dict[str, Any], path: str) -> dict[str, Any]:
        if _MARKER in patch:
            directive = patch.pop(_MARKER)
            if directive == "replace":
                return self.merge_map({}, patch, path)
            if directive == "delete":
                return {}
            if directive != "merge":  # "merge" is accepted as the default; kube rejects it
                raise _internal(f"unknown patch type: {directive} in map: {patch}")
        self._retain_keys(original, patch)
        orders = self._element_orders(patch)
        for key, value in patch.items():
            if key.startswith(_SET_ELEMENT_ORDER) or key == _RETAIN_KEYS:
                continue
            if key.startswith(_DELETE_FROM_PRIMITIVE):
                self._delete_from_primitive_list(original, key, value)
                continue
            child = f"{path}.{key}" if path else key
            current = original.get(key)
            if value is None:
                original.pop(key, None)
            elif isinstance(value, dict):
                original[key] = self.merge_map(current if isinstance(current, dict) else {}, value, child)
            elif isinstance(value, list):
                base = current if isinstance(current, list) else []
                original[key] = self.merge_list(base, value, child, orders.get(key))
            else:
                original[key] = value
        for key, order in orders.items():
            if key not in patch and isinstance(original.get(key), list):
                child = f"{path}.{key}" if path else key
                original[key] = self.merge_list(original[key], [], child, order)
        return original

    @staticmethod
    def _retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
        if _RETAIN_KEYS not in patch:
            return
        retained = patch[_RETAIN_KEYS]
        if not isinstance(retained, list):
            raise _bad_request("invalid patch format of retainKeys")
        for key, value in patch.items():
            if value is None or key.startswith("$"):
                continue
            if key not in retained:
                raise _bad_request("invalid patch format of retainKeys")
        for key in [k for k in original if k not in retained]:
            del original[key]

    @staticmethod
    def _element_orders(patch: dict[str, Any]) -> dict[str, list[Any]]:
        orders: dict[str, list[Any]] = {}
        for key, value in patch.items():
            if not key.startswith(_SET_ELEMENT_ORDER):
                continue
            field = _directive_field(key, _SET_ELEMENT_ORDER, "invalid patch format of setElementOrder list")
            if not isinstance(value, list):
                raise _bad_request("invalid patch format of setElementOrder list")
            orders[field] = value
        return orders

    @staticmethod
    def _delete_from_primitive_list(original: dict[str, Any], key: str, value: Any) -> None:
        message = "invalid patch format of primitive list"
        field = _directive_field(key, _DELETE_FROM_PRIMITIVE, message)
        if not isinstance(value, list):
            raise _bad_request(message)
        current = original.get(field)
        if isinstance(current, list):
            original[field] = [item for item in current if item not in value]

    def merge_list(
        self, original: list[Any], patch: list[Any], path: str, order: list[Any] | None
    ) -> list[Any]:
        if path not in self.keys:
            return patch
        if any(isinstance(item, list) for item in (*original, *patch)):
            raise _unprocessable("lists of lists are not supported")
        merge_key = self.keys[path]
        if merge_key is PRIMITIVE:
            if any(isinstance(item, dict) for item in patch):
                raise _internal(f"cannot merge lists without merge key for {path}")
            merged = _dedupe([*original, *patch])
            return _normalize_order(merged, order if order is not None else patch, original, None)
        return self._merge_keyed_list(original, patch, path, merge_key, order)

    def _merge_keyed_list(
        self, original: list[Any], patch: list[Any], path: str, merge_key: str, order: list[Any] | None
    ) -> list[Any]:
        if not all(isinstance(item, dict) for item in (*original, *patch)):
            raise _internal(f"mismatched types in list {path}: expected maps keyed by {merge_key}")
        base = list(original)
        plain: list[dict[str, Any]] = []
        replace = False
        for item in patch:
            directive = item.get(_MARKER)
            if directive is None:
                plain.append(item)
            elif directive == "delete":
                if merge_key not in item:
                    raise _internal(f"map: {item} does not contain declared merge key: {merge_key}")
                base = [el for el in base if el.get(merge_key) != item[merge_key]]
            elif directive == "replace":
                replace = True
            elif directive == "merge":
                plain.append({k: v for k, v in item.items() if k != _MARKER})
            else:
                raise _internal(f"unknown patch type: {directive} in map: {item}")
        if replace:
            return [self.merge_map({}, item, path) for item in plain]
        merged = list(base)
        for item in plain:
            if merge_key not in item:
                raise _internal(f"map: {item} does not contain declared merge key: {merge_key}")
            index = _index_of(merged, item, merge_key)
            if index >= 0:
                merged[index] = self.merge_map(merged[index], item, path)
            else:
                merged.append(self.merge_map({}, item, path))
        return _normalize_order(merged, order if order is not None else plain, base, merge_key)


def _directive_field(key: str, prefix: str, message: str) -> str:
    head, _, field = key.partition("/")
    if head != prefix or not field:
        raise _bad_request(message)
    return field


def _dedupe(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def _index_of(items: list[Any], item: Any, merge_key: str | None) -> int:
    for index, candidate in enumerate(items):
        if merge_key is None:
            if candidate == item:
                return index
        elif (
            isinstance(candidate, dict)
            and isinstance(item, dict)
            and merge_key in candidate
            and candidate.get(merge_key) == item.get(merge_key)
        ):
            return index
    return -1


def _normalize_order(
    merged: list[Any], patch_order: list[Any], server_order: list[Any], merge_key: str | None
) -> list[Any]:
    """kube's ordering: patch items in patch (or $setElementOrder) order, server-only items in
    live order, interleaved where the live order relates them; otherwise patch items come first."""

    def position(order: list[Any]) -> Callable[[Any], int]:
        def key(item: Any) -> int:
            found = _index_of(order, item, merge_key)
            return found if found >= 0 else len(order)

        return key

    in_patch = [item for item in merged if _index_of(patch_order, item, merge_key) >= 0]
    server_only = [item for item in merged if _index_of(patch_order, item, merge_key) < 0]
    in_patch.sort(key=position(patch_order))
    server_only.sort(key=position(server_order))
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(in_patch):
        if j >= len(in_patch):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(in_patch[j])
            j += 1
        else:
            left = _index_of(server_order, server_only[i], merge_key)
            right = _index_of(server_order, in_patch[j], merge_key)
            if 0 <= left < right:
                out.append(server_only[i])
                i += 1
            else:
                out.append(in_patch[j])
                j += 1
    return out
