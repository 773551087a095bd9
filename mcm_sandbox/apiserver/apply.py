"""Server-side apply: field managers, ``managedFields`` and conflicts (``kubectl apply --server-side``).

Upstream's structured-merge-diff in small: an object's fields are a set of paths (``f:`` fields,
``k:`` list-map items by their keys, ``v:`` set members); each manager owns a set, kept in
``metadata.managedFields`` as FieldsV1. An apply merges the applied configuration into the live
object (list-maps by their keys, sets as unions, atomic lists replaced), removes the fields the
manager applied last time but no longer does (unless another manager owns them), and refuses with
409 when it would change a field another manager owns, unless ``force=true``. Updates to an object
that has ``managedFields`` give the updating manager the fields it changed.

List semantics come from the schema: ``x-kubernetes-list-type``/``-list-map-keys`` of kube's
published definitions for built-ins (falling back to the patch merge key), of the CRD's schema for
custom resources; a list without either is atomic.
"""

from __future__ import annotations

import json
from typing import Any

from mcm_sandbox.apiserver import errors, kube_openapi, objects

Path = tuple[str, ...]
Node = dict[str, Any]


# --- schema navigation ------------------------------------------------------------------------


def _resolve(node: Any) -> Node:
    while isinstance(node, dict):
        name = kube_openapi.ref_name(node)
        if name is None:
            all_of = node.get("allOf")
            if (
                isinstance(all_of, list)
                and len(all_of) == 1
                and isinstance(all_of[0], dict)
                and "properties" not in node
            ):
                node = all_of[0]
                continue
            return node
        node = kube_openapi.definitions().get(name) or {}
    return {}


def _child(node: Node, key: str) -> Node:
    props = node.get("properties") or {}
    if key in props:
        return _resolve(props[key])
    extra = node.get("additionalProperties")
    return _resolve(extra) if isinstance(extra, dict) else {}


def _list_kind(node: Node) -> tuple[str, list[str]]:
    kind = node.get("x-kubernetes-list-type")
    if kind == "map":
        return "map", list(node.get("x-kubernetes-list-map-keys") or [])
    if kind == "set":
        return "set", []
    if kind is None and node.get("x-kubernetes-patch-merge-key"):
        return "map", [node["x-kubernetes-patch-merge-key"]]
    if kind is None and "merge" in str(node.get("x-kubernetes-patch-strategy") or ""):
        return "set", []
    return "atomic", []


# List-map key fields the server defaults (kube's OpenAPI v3 publishes these as ``default``; the v2
# definitions we read do not), so an applied port without ``protocol`` matches the stored TCP one.
_KEY_DEFAULTS = {"protocol": "TCP"}


def _item_key(item: Any, keys: list[str]) -> str:
    if not isinstance(item, dict):
        return "v:" + json.dumps(item, separators=(",", ":"))
    values = {k: item[k] if k in item else _KEY_DEFAULTS[k] for k in keys if k in item or k in _KEY_DEFAULTS}
    return "k:" + json.dumps(values, separators=(",", ":"), sort_keys=True)


# --- field sets -------------------------------------------------------------------------------


def field_set(obj: Any, schema: Node, prefix: Path = ()) -> set[Path]:
    """Every leaf path of ``obj`` (map items also own their ``.`` entry)."""
    out: set[Path] = set()
    if isinstance(obj, dict):
        for key, value in obj.items():
            path = (*prefix, "f:" + key)
            child = _child(schema, key)
            if isinstance(value, dict) and value and child.get("x-kubernetes-map-type") != "atomic":
                out |= field_set(value, child, path)
            elif isinstance(value, list) and value:
                out |= _list_fields(value, child, path)
            else:
                out.add(path)
    return out


def _list_fields(items: list[Any], schema: Node, path: Path) -> set[Path]:
    kind, keys = _list_kind(schema)
    if kind == "atomic":
        return {path}
    item_schema = _resolve(schema.get("items") or {})
    out: set[Path] = set()
    for item in items:
        item_path = (*path, _item_key(item, keys))
        out.add((*item_path, "."))
        if kind == "map" and isinstance(item, dict):
            out |= field_set(item, item_schema, item_path)
    return out


def encode(fields: set[Path]) -> dict[str, Any]:
    """A field set as FieldsV1 JSON."""
    root: dict[str, Any] = {}
    for path in sorted(fields):
        node = root
        for part in path:
            node = node.setdefault(part, {})
    return root


def decode(fields_v1: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(fields_v1, dict):
        return out
    for key, value in fields_v1.items():
        path = (*prefix, key)
        if isinstance(value, dict) and value:
            out |= decode(value, path)
        else:
            out.add(path)
    return out


def _lookup(obj: Any, path: Path) -> tuple[bool, Any]:
    """(found, value) at ``path`` in ``obj``."""
    node = obj
    for part in path:
        if part == ".":
            return True, node
        kind, _, rest = part.partition(":")
        if kind == "f" and isinstance(node, dict) and rest in node:
            node = node[rest]
        elif kind in ("k", "v") and isinstance(node, list):
            match = [item for item in node if _matches(item, kind, rest)]
            if not match:
                return False, None
            node = match[0]
        else:
            return False, None
    return True, node


def _matches(item: Any, kind: str, rest: str) -> bool:
    wanted = json.loads(rest)
    if kind == "v":
        return bool(item == wanted)
    return isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items())


def _remove(obj: Any, path: Path) -> None:
    if not path:
        return
    parent_path, last = path[:-1], path[-1]
    if last == ".":
        parent_path, last = path[:-2], path[-2]
    found, parent = _lookup(obj, parent_path)
    if not found:
        return
    kind, _, rest = last.partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(rest, None)
    elif kind in ("k", "v") and isinstance(parent, list):
        parent[:] = [item for item in parent if not _matches(item, kind, rest)]


# --- merging ----------------------------------------------------------------------------------


def merge(live: Any, applied: Any, schema: Node) -> Any:
    if isinstance(live, dict) and isinstance(applied, dict):
        out = dict(live)
        for key, value in applied.items():
            child = _child(schema, key)
            if child.get("x-kubernetes-map-type") == "atomic":
                out[key] = value
            else:
                out[key] = merge(live.get(key), value, child)
        return out
    if isinstance(live, list) and isinstance(applied, list):
        kind, keys = _list_kind(schema)
        if kind == "atomic":
            return applied
        item_schema = _resolve(schema.get("items") or {})
        out_list = list(live)
        for item in applied:
            key = _item_key(item, keys)
            index = next((i for i, cur in enumerate(out_list) if _item_key(cur, keys) == key), -1)
            if index < 0:
                out_list.append(item)
            elif kind == "map":
                out_list[index] = merge(out_list[index], item, item_schema)
        return out_list
    return applied


# --- managedFields ----------------------------------------------------------------------------


def _entries(obj: Node) -> list[Node]:
    return list((obj.get("metadata") or {}).get("managedFields") or [])


def _owned(entries: list[Node]) -> dict[tuple[str, str], set[Path]]:
    return {(e.get("manager", ""), e.get("operation", "")): decode(e.get("fieldsV1")) for e in entries}


def _write_entries(
    obj: Node, owned: dict[tuple[str, str], set[Path]], api_version: str, touched: set[tuple[str, str]]
) -> None:
    old = {(e.get("manager", ""), e.get("operation", "")): e for e in _entries(obj)}
    out = []
    for (manager, operation), fields in owned.items():
        if not fields:
            continue
        entry = dict(old.get((manager, operation)) or {})
        entry.update(
            {"manager": manager, "operation": operation, "apiVersion": entry.get("apiVersion", api_version)}
        )
        if (manager, operation) in touched or "time" not in entry:
            entry["apiVersion"] = api_version
            entry["time"] = objects.now_iso()
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = encode(fields)
        out.append(entry)
    obj["metadata"]["managedFields"] = out


_META_SET_BY_SERVER = (
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "name",
    "namespace",
)
_IGNORED = {("f:metadata", f"f:{k}") for k in _META_SET_BY_SERVER} | {("f:apiVersion",), ("f:kind",)}


def _tracked(fields: set[Path], sub: str | None) -> set[Path]:
    out = {p for p in fields if p[:2] not in _IGNORED and p[:1] not in _IGNORED}
    if sub == "status":
        return {p for p in out if p[:1] == ("f:status",)}
    return {p for p in out if p[:1] != ("f:status",)}


def _path_text(path: Path) -> str:
    text = ""
    for part in path:
        if part == ".":
            continue
        kind, _, rest = part.partition(":")
        text += f".{rest}" if kind == "f" else f"[{rest}]" if kind == "k" else f"[={rest}]"
    return text


def apply(
    live: Node | None, applied: Node, schema: Node, manager: str, api_version: str, force: bool
) -> Node:
    """The object an apply by ``manager`` produces from ``live`` (None: created by this apply)."""
    applied_fields = _tracked(field_set(applied, schema), None)
    if live is None:
        created: Node = json.loads(json.dumps(applied))
        created.setdefault("metadata", {})
        _write_entries(created, {(manager, "Apply"): applied_fields}, api_version, {(manager, "Apply")})
        return created
    owned = _owned(_entries(live))
    conflicts: dict[str, list[Path]] = {}
    taken: dict[tuple[str, str], set[Path]] = {}
    for (other, operation), fields in owned.items():
        if (other, operation) == (manager, "Apply"):
            continue
        for path in applied_fields & fields:
            if path[-1] == ".":
                continue
            found_live, live_value = _lookup(live, path)
            _, new_value = _lookup(applied, path)
            if found_live and live_value != new_value:
                conflicts.setdefault(other, []).append(path)
                taken.setdefault((other, operation), set()).add(path)
    if conflicts and not force:
        raise _conflict(conflicts, api_version)
    result: Node = merge(json.loads(json.dumps(live)), applied, schema)
    previous = owned.get((manager, "Apply"), set())
    for key, fields in owned.items():  # forced: conflicting fields change hands; equal values are shared
        owned[key] = fields - taken.get(key, set())
    still_owned = set().union(*(f for k, f in owned.items() if k != (manager, "Apply"))) if owned else set()
    # whole list items first (their key fields must still be there to find them), then leaves
    for path in sorted(previous - applied_fields - still_owned, key=lambda p: (p[-1] != ".", -len(p))):
        _remove(result, path)
    owned[(manager, "Apply")] = applied_fields
    result["metadata"]["managedFields"] = live["metadata"].get("managedFields") or []
    _write_entries(result, owned, api_version, {(manager, "Apply")})
    return result


def record_update(
    old: Node, new: Node, schema: Node, manager: str, api_version: str, sub: str | None
) -> None:
    """An update by ``manager`` owns the fields it changed (only for objects already tracked)."""
    if not _entries(old) or not manager:
        return
    before, after = field_set(old, schema), field_set(new, schema)
    changed = {p for p in _tracked(after, sub) if p not in before or _lookup(old, p)[1] != _lookup(new, p)[1]}
    owned = _owned(_entries(old))
    for key in owned:  # changed fields move to this manager; removed fields leave their owners
        owned[key] = {p for p in owned[key] if p not in changed and p in after}
    key = (manager, "Update")
    owned[key] = owned.get(key, set()) | changed
    new.setdefault("metadata", {})["managedFields"] = old["metadata"].get("managedFields")
    _write_entries(new, owned, api_version, {key} if changed else set())


def _conflict(conflicts: dict[str, list[Path]], api_version: str) -> errors.ApiError:
    total = sum(len(p) for p in conflicts.values())
    causes = [
        errors.cause(
            _path_text(path), f'conflict with "{manager}" using {api_version}', "FieldManagerConflict"
        )
        for manager, paths in conflicts.items()
        for path in sorted(paths)
    ]
    if total == 1:
        manager, paths = next(iter(conflicts.items()))
        where = _path_text(paths[0])
        message = f'Apply failed with 1 conflict: conflict with "{manager}" using {api_version}: {where}'
    else:
        parts = []
        for manager, paths in conflicts.items():
            noun = "conflict" if len(paths) == 1 else "conflicts"
            lines = "".join(f"\n- {_path_text(p)}" for p in sorted(paths))
            parts.append(f'{noun} with "{manager}" using {api_version}:{lines}')
        message = f"Apply failed with {total} conflicts: " + "\n".join(parts)
    return errors.ApiError(409, "Conflict", message, {"causes": causes})


def schema_for(rt: Any) -> Node:
    if rt.crd:
        return rt.schema or {}
    name = kube_openapi.definition_name(rt.group, rt.version, rt.kind)
    return _resolve({"$ref": kube_openapi.REF_PREFIX + name}) if name else {}
