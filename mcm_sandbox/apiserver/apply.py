"""Server-side apply: field managers and conflicts (``kubectl apply --server-side``).

Upstream's ``merge.Updater.Apply`` in small: an apply merges the applied configuration into the
live object (list-maps by their keys, sets as unions, atomic lists replaced), removes the fields
the manager applied last time but no longer does (unless another manager owns them or something
under them), and refuses with 409 when the result changes a field another manager owns -- an
applier or, since every write is tracked (``managed_fields``), any Update manager -- unless
``force=true``, which moves those fields to the applier. ``lastapplied`` lets kubectl take over
what its own client-side applies set.

List semantics come from the schema: ``x-kubernetes-list-type``/``-list-map-keys`` of kube's
published definitions for built-ins (falling back to the patch merge key), of the CRD's schema for
custom resources; a list without either is atomic.
"""

from __future__ import annotations

import json
from typing import Any

from mcm_sandbox.apiserver import errors, kube_openapi, lastapplied, objects
from mcm_sandbox.apiserver import fieldsets as fs
from mcm_sandbox.apiserver import managed_fields as mf

Path = fs.Path
Node = fs.Node


def _lookup(obj: Any, path: Path) -> tuple[bool, Any]:
    """(found, value) at ``path`` in ``obj``."""
    node = obj
    for part in path:
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
    # a key field the item leaves out matches its default (the key was built with it)
    return isinstance(item, dict) and all(item.get(k, v) == v for k, v in wanted.items())


def _remove(obj: Any, path: Path) -> None:
    if not path:
        return
    parent_path, last = path[:-1], path[-1]
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
            child = fs.child(schema, key)
            if fs.atomic_map(child):
                out[key] = value
            else:
                out[key] = merge(live.get(key), value, child)
        return out
    if isinstance(live, list) and isinstance(applied, list):
        kind, keys = fs.list_kind(schema)
        if kind == "atomic":
            return applied
        item_schema = fs.resolve(schema.get("items") or {})
        out_list = list(live)
        for item in applied:
            key = fs.item_key(item, keys, item_schema)
            index = next(
                (i for i, cur in enumerate(out_list) if fs.item_key(cur, keys, item_schema) == key), -1
            )
            if index < 0:
                out_list.append(item)
            elif kind == "map":
                out_list[index] = merge(out_list[index], item, item_schema)
        return out_list
    return applied


# --- the Apply operation ----------------------------------------------------------------------

# StripMetaManager's set (``metadata`` itself is no leaf of a field set: only what is under it)
_STRIPPED = {("f:apiVersion",), ("f:kind",)}
_STRIPPED_META = {("f:metadata", "f:" + k) for k in mf.STRIPPED_META}


def _tracked(fields: set[Path], sub: str | None, has_status: bool) -> set[Path]:
    """The applied configuration's fields the applier owns: server-set metadata stripped, status
    only through /status (and, for a kind with a status subresource, not through the object)."""
    out = {p for p in fields if p[:1] not in _STRIPPED and p[:2] not in _STRIPPED_META}
    if sub == "status":
        return {p for p in out if p[:1] == ("f:status",)}
    return {p for p in out if p[:1] != ("f:status",)} if has_status else out


def _entry(manager: str, api_version: str, fields: set[Path], sub: str | None) -> Node:
    return mf.make_entry(manager, "Apply", api_version, objects.now_iso(), fs.encode(fields), sub or "")


def apply(
    live: Node | None,
    applied: Node,
    schema: Node,
    manager: str,
    api_version: str,
    force: bool,
    sub: str | None = None,
    has_status: bool = False,
    crd: bool = False,
) -> Node:
    """The object an apply by ``manager`` produces from ``live`` (None: created by this apply)."""
    applied_fields = _tracked(fs.field_set(applied, schema), sub, has_status)
    key = (manager, "Apply", "", sub or "")
    if live is None:
        created: Node = json.loads(json.dumps(applied))
        entry = mf.make_entry(
            manager, "Apply", api_version, objects.now_iso(), fs.encode(applied_fields), sub or ""
        )
        created.setdefault("metadata", {})["managedFields"] = [entry]
        return created
    entries = [e for e in (live["metadata"].get("managedFields") or []) if isinstance(e, dict)]
    owned = {mf.ident(e): fs.decode(e.get("fieldsV1")) for e in entries}
    result: Node = merge(json.loads(json.dumps(live)), applied, schema)
    previous = owned.get(key, set())
    others = set().union(*(f for k, f in owned.items() if k != key))
    # Upstream's prune: fields this manager applied last time and no longer does go, unless another
    # manager owns them or something under them (``addBackOwnedItems``); whole list items first
    # (their keys must still be there to find them).
    kept = others | applied_fields
    holding = {p[:i] for p in kept for i in range(1, len(p))}
    gone = previous - kept - holding
    for path in sorted(gone, key=lambda p: (p[-1][:2] == "f:", -len(p))):
        _remove(result, path)
    changed, removed = mf.changes(live, result, schema, sub, has_status, crd)
    changed_set = set(changed)
    conflicts = {k: owned[k] & changed_set for k in owned if k != key and owned[k] & changed_set}
    if conflicts and not force and not lastapplied.allows(live, manager, conflicts, schema):
        raise _conflict(conflicts, live)
    for k in owned:
        if k != key:
            owned[k] = owned[k] - changed_set - set(removed)
    owned[key] = applied_fields
    out: list[Node] = []
    for e in entries:
        k = mf.ident(e)
        if k == key:
            continue
        if owned[k]:
            out.append(mf.with_fields(e, fs.encode(owned[k])) if k in conflicts or removed else e)
    if applied_fields:
        out.append(
            mf.make_entry(
                manager, "Apply", api_version, objects.now_iso(), fs.encode(applied_fields), sub or ""
            )
        )
    result["metadata"]["managedFields"] = mf.finish(out)
    lastapplied.sync(result, applied, manager)
    return result


def _path_text(path: Path) -> str:
    """``fieldpath.Path.String``: ``.spec.ports[port=80,protocol="TCP"]``, ``.finalizers[="a"]``."""
    text = ""
    for part in path:
        kind, _, rest = part.partition(":")
        if kind == "f":
            text += "." + rest
        elif kind == "k":
            keys = json.loads(rest)
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(keys.items())) + "]"
        else:
            text += f"[={rest}]"
    return text


def _manager_text(key: tuple[str, str, str, str], live: Node) -> str:
    """``printManager``: appliers by name, updaters with their subresource and apiVersion."""
    manager, operation, version, sub = key
    text = json.dumps(manager)
    if sub:
        text += f" with subresource {json.dumps(sub)}"
    return text + f" using {version}" if operation == "Update" else text


def _conflict(conflicts: dict[tuple[str, str, str, str], set[Path]], live: Node) -> errors.ApiError:
    """``NewConflictError``: one cause per conflicting field, the message grouped by manager."""
    ordered = sorted(conflicts.items(), key=lambda kv: kv[0])
    pairs = [(key, path) for key, paths in ordered for path in sorted(paths, key=_path_text)]
    causes = [
        errors.cause(_path_text(path), f"conflict with {_manager_text(key, live)}", "FieldManagerConflict")
        for key, path in pairs
    ]
    if len(pairs) == 1:
        key, path = pairs[0]
        message = (
            f"Apply failed with 1 conflict: conflict with {_manager_text(key, live)}: {_path_text(path)}"
        )
    else:
        lines = []
        for key, paths in ordered:
            lines.append(f"conflicts with {_manager_text(key, live)}:")
            lines.extend(f"- {_path_text(p)}" for p in sorted(paths, key=_path_text))
        message = f"Apply failed with {len(pairs)} conflicts: " + "\n".join(lines)
    return errors.ApiError(409, "Conflict", message, {"causes": causes})


_OBJECT_META = {"$ref": kube_openapi.REF_PREFIX + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
_CRD_SCHEMAS: dict[int, tuple[Node, Node]] = {}


def schema_for(rt: Any) -> Node:
    """The schema field sets follow: a CRD's, with kube's ObjectMeta (as the type converter
    upstream gives custom resources: owner references by uid, finalizers as a set)."""
    if rt.crd:
        base: Node = rt.schema or {}
        cached = _CRD_SCHEMAS.get(id(base))
        if cached is not None and cached[0] is base:
            return cached[1]
        out = {**base, "properties": {**(base.get("properties") or {}), "metadata": _OBJECT_META}}
        _CRD_SCHEMAS[id(base)] = (base, out)
        return out
    name = kube_openapi.definition_name(rt.group, rt.version, rt.kind)
    return fs.resolve({"$ref": kube_openapi.REF_PREFIX + name}) if name else {}
