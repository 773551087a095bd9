"""Field sets as structured-merge-diff keeps them: the paths of an object, their diff, FieldsV1.

A path is a tuple of elements: ``f:name`` a field, ``k:{...}`` a list-map item by its keys (JSON,
sorted), ``v:...`` a set member. A set serializes as FieldsV1, a tree in which a node that is
itself a member and has children holds ``"."``. List semantics come from the schema:
``x-kubernetes-list-type``/``-list-map-keys`` (falling back to the patch merge key), else atomic;
maps are granular unless ``x-kubernetes-map-type: atomic``.
"""

from __future__ import annotations

import json
from typing import Any

from mcm_sandbox.apiserver import kube_openapi

Path = tuple[str, ...]
Node = dict[str, Any]
Tree = dict[str, Any]
MISSING: Any = object()

# --- schema navigation ------------------------------------------------------------------------

_CHILDREN: dict[tuple[int, str], tuple[Node, Node]] = {}


def resolve(node: Any) -> Node:
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


def child(node: Node, key: str) -> Node:
    """The schema of ``key`` under ``node`` (memoised: schemas live as long as the server)."""
    cached = _CHILDREN.get((id(node), key))
    if cached is not None and cached[0] is node:
        return cached[1]
    props = node.get("properties") or {}
    if key in props:
        out = resolve(props[key])
    else:
        extra = node.get("additionalProperties")
        out = resolve(extra) if isinstance(extra, dict) else {}
    _CHILDREN[(id(node), key)] = (node, out)
    return out


def list_kind(node: Node) -> tuple[str, list[str]]:
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


def atomic_map(node: Node) -> bool:
    return node.get("x-kubernetes-map-type") == "atomic"


# List-map key fields kube's OpenAPI v3 publishes a ``default`` for (the v2 definitions the sandbox
# reads for built-ins do not): an item without the key field is keyed by the default, as
# structured-merge-diff's ``keyedAssociativeListItemToPathElement`` does. CRD schemas carry their own.
_BUILTIN_KEY_DEFAULTS = {"protocol": "TCP"}


def item_key(item: Any, keys: list[str], item_schema: Node) -> str:
    if not isinstance(item, dict):
        return "v:" + json.dumps(item, separators=(",", ":"))
    values = {}
    props = item_schema.get("properties") or {}
    for key in keys:
        if key in item:
            values[key] = item[key]
        elif "default" in (props.get(key) or {}):
            values[key] = props[key]["default"]
        elif key in _BUILTIN_KEY_DEFAULTS:
            values[key] = _BUILTIN_KEY_DEFAULTS[key]
    return "k:" + json.dumps(values, separators=(",", ":"), sort_keys=True)


def _indexed(items: list[Any], keys: list[str], item_schema: Node) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        out.setdefault(item_key(item, keys, item_schema), item)  # repeated keys: the first wins
    return out


# --- field sets -------------------------------------------------------------------------------


def field_set(obj: Any, schema: Node, prefix: Path = ()) -> set[Path]:
    """``TypedValue.ToFieldSet``: every leaf, and every list item, of ``obj``."""
    out: set[Path] = set()
    if isinstance(obj, dict):
        for key, value in obj.items():
            path = (*prefix, "f:" + key)
            sub = child(schema, key)
            if isinstance(value, dict) and value and not atomic_map(sub):
                out |= field_set(value, sub, path)
            elif isinstance(value, list) and value and list_kind(sub)[0] != "atomic":
                kind, keys = list_kind(sub)
                item_schema = resolve(sub.get("items") or {})
                for item_path_key, item in _indexed(value, keys, item_schema).items():
                    item_path = (*path, item_path_key)
                    out.add(item_path)
                    if kind == "map" and isinstance(item, dict):
                        out |= field_set(item, item_schema, item_path)
            else:
                out.add(path)
    return out


def compare(lhs: Any, rhs: Any, schema: Node, path: Path = ()) -> tuple[list[Path], list[Path]]:
    """``TypedValue.Compare``: (added or modified, removed) paths from ``lhs`` to ``rhs``."""
    changed: list[Path] = []
    removed: list[Path] = []
    walk(lhs, rhs, schema, path, changed, removed)
    return changed, removed


def walk(lhs: Any, rhs: Any, schema: Node, path: Path, changed: list[Path], removed: list[Path]) -> None:
    l_map, r_map = type(lhs) is dict or lhs is MISSING, type(rhs) is dict or rhs is MISSING
    if l_map and r_map and (lhs or rhs) and not atomic_map(schema):
        left: dict[str, Any] = {} if lhs is MISSING else lhs
        right: dict[str, Any] = {} if rhs is MISSING else rhs
        for key in left.keys() | right.keys():
            lv, rv = left.get(key, MISSING), right.get(key, MISSING)
            if lv is not rv and (lv is MISSING or rv is MISSING or lv != rv):
                walk(lv, rv, child(schema, key), (*path, "f:" + key), changed, removed)
    elif (
        (type(lhs) is list or lhs is MISSING)
        and (type(rhs) is list or rhs is MISSING)
        and (lhs or rhs)
        and list_kind(schema)[0] != "atomic"
    ):
        _, keys = list_kind(schema)
        item_schema = resolve(schema.get("items") or {})
        left_items = _indexed([] if lhs is MISSING else lhs, keys, item_schema)
        right_items = _indexed([] if rhs is MISSING else rhs, keys, item_schema)
        for key in left_items.keys() | right_items.keys():
            lv, rv = left_items.get(key, MISSING), right_items.get(key, MISSING)
            if lv is MISSING or rv is MISSING or lv != rv:
                walk(lv, rv, item_schema, (*path, key), changed, removed)
    elif lhs is not MISSING and rhs is not MISSING:
        if lhs != rhs:
            changed.append(path)
        return
    if lhs is MISSING:  # a leaf, or (the post-item hook) a map or list item that appeared
        changed.append(path)
    elif rhs is MISSING:
        removed.append(path)


# --- FieldsV1 trees ---------------------------------------------------------------------------


def encode(fields: set[Path]) -> Tree:
    tree: Tree = {}
    for path in fields:
        insert(tree, path)
    return tree


def decode(tree: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(tree, dict):
        return out
    for key, value in tree.items():
        if key == ".":
            out.add(prefix)
        elif isinstance(value, dict) and value:
            out |= decode(value, (*prefix, key))
        else:
            out.add((*prefix, key))
    return out


def insert(tree: Tree, path: Path) -> None:
    node = tree
    for i, part in enumerate(path):
        sub = node.get(part)
        if sub is None:
            sub = node[part] = {}
        elif (not sub) if i < len(path) - 1 else (sub and "." not in sub):
            sub["."] = {}  # a member leaf gains children, or a prefix becomes a member too
        node = sub


def discard(tree: Tree, path: Path) -> None:
    stack: list[tuple[Tree, str]] = []
    node = tree
    for part in path:
        sub = node.get(part)
        if sub is None:
            return
        stack.append((node, part))
        node = sub
    if "." in node:
        del node["."]
        if node:
            return
    elif node:
        return  # only a prefix of members, not a member itself
    while stack:
        parent, part = stack.pop()
        del parent[part]
        if parent == {".": {}}:
            parent.clear()  # a member whose last child went: a member leaf again
            return
        if parent:
            return


def touches(tree: Tree, paths: list[Path]) -> bool:
    for path in paths:
        node: Any = tree
        for part in path:
            node = node.get(part)
            if node is None:
                break
        else:
            return True
    return False


def sorted_tree(tree: Tree) -> Tree:
    """FieldsV1 as upstream writes it: ``.`` first, then fields, keys and values in order."""
    return {k: sorted_tree(tree[k]) if tree[k] else {} for k in sorted(tree)}


# Stored objects are never mutated after commit, so equal FieldsV1 trees and entries are shared
# between objects and their history (a fleet's Machines have the same field sets): memory per
# stored object stays near kube's serialized size rather than a tree of dicts per version.


def added(value: Any, schema: Node) -> Tree:
    """The sorted FieldsV1 node of a value that did not exist before (``compare`` against nothing)."""
    if type(value) is dict and value and not atomic_map(schema):
        node: Tree = {".": {}}
        for key in sorted(value):
            node["f:" + key] = added(value[key], child(schema, key))
        return node
    if type(value) is list and value:
        kind, keys = list_kind(schema)
        if kind != "atomic":
            item_schema = resolve(schema.get("items") or {})
            items = _indexed(value, keys, item_schema)
            node = {".": {}}
            for key in sorted(items):
                item = items[key]
                node[key] = added(item, item_schema) if kind == "map" else {}
            return node
    return {}
