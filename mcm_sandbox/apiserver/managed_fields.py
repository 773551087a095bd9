"""``metadata.managedFields`` on every write: kube-apiserver's field manager, Update operations.

Upstream (``k8s.io/apimachinery/pkg/util/managedfields/internal``) runs every create, update and
patch through ``FieldManager.UpdateNoErrors``: the request's manager (``?fieldManager=``, else the
user agent's first token) takes the fields this write added or changed
(``managedFieldsUpdater`` runs the write as ``current-operation`` and merges it into the manager's
entry, stamping ``time`` only when it took something); fields it changed leave their other owners
and removed fields leave everyone (``merge.Updater.update``); ``StripMetaManager`` keeps
``apiVersion``, ``kind`` and the server-set metadata out; ``CapManagersManager`` folds the oldest
Update entries past ten into ``ancient-changes``; entries are keyed by (manager, operation,
apiVersion for updates, subresource) and sorted as ``sortEncodedManagedFields`` does. A request
that carries ``managedFields`` replaces them (``[{}]`` clears them), except on a subresource.

Field sets and their diff are ``fieldsets``'. Writes are frequent (our controllers patch Machines
and Nodes thousands of times per benchmark), so the Update path compares the two objects once,
skipping equal subtrees, edits only the FieldsV1 trees it touches, builds a create's tree
directly, and shares equal trees and entries between stored objects.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mcm_sandbox.apiserver import fieldsets as fs
from mcm_sandbox.apiserver import objects
from mcm_sandbox.apiserver.store import dumps, loads

MAX_UPDATE_MANAGERS = 10  # DefaultMaxUpdateManagers
ANCIENT = "ancient-changes"

# --- entries ----------------------------------------------------------------------------------


def ident(entry: fs.Node) -> tuple[str, str, str, str]:
    """``BuildManagerIdentifier``: appliers keep one entry across apiVersions, updaters do not."""
    operation = entry.get("operation", "")
    version = "" if operation == "Apply" else entry.get("apiVersion", "")
    return entry.get("manager", ""), operation, version, entry.get("subresource", "")


_SHARED: dict[Any, Any] = {}
_SHARED_LIMIT = 20_000


def _share(key: Any, value: Any) -> Any:
    found = _SHARED.get(key)
    if found is not None:
        return found
    if len(_SHARED) >= _SHARED_LIMIT:
        _SHARED.clear()
    _SHARED[key] = value
    return value


def with_fields(entry: fs.Node, tree: fs.Tree) -> fs.Node:
    """``entry`` owning ``tree`` instead (a new dict; the tree shared with equal ones)."""
    tree = fs.sorted_tree(tree)
    return {**entry, "fieldsV1": _share(dumps(tree), tree)}


def make_entry(
    manager: str,
    operation: str,
    api_version: str,
    stamp: str,
    tree: fs.Tree,
    sub: str,
    presorted: bool = False,
) -> fs.Node:
    """A new entry (shared with equal ones: never mutate what this returns)."""
    tree = tree if presorted else fs.sorted_tree(tree)
    tree = _share(dumps(tree), tree)
    entry = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": stamp,
        "fieldsType": "FieldsV1",
        "fieldsV1": tree,
    }
    if sub:
        entry["subresource"] = sub
    shared: fs.Node = _share((manager, operation, api_version, stamp, sub, id(tree)), entry)
    return shared


def finish(entries: list[fs.Node]) -> list[fs.Node]:
    """Cap the Update entries and sort them as kube encodes them."""
    updates = [e for e in entries if e.get("operation") == "Update"]
    if len(updates) > MAX_UPDATE_MANAGERS:
        updates.sort(key=lambda e: (e.get("time") or "", ident(e)))
        buckets: dict[str, fs.Node] = {}
        folded = set()
        for entry in updates[: len(updates) - MAX_UPDATE_MANAGERS + 1]:
            if entry.get("manager") == ANCIENT:
                continue
            version = entry.get("apiVersion", "")
            found = buckets.get(version) or next(
                (e for e in entries if ident(e) == (ANCIENT, "Update", version, "")), None
            )
            tree = loads(dumps((found or {}).get("fieldsV1") or {}))
            for path in fs.decode(entry.get("fieldsV1")):
                fs.insert(tree, path)
            stamp = max((found or {}).get("time") or "", entry.get("time") or "")
            bucket = make_entry(ANCIENT, "Update", version, stamp, tree, "")
            entries = [e for e in entries if e is not found] + [bucket]
            buckets[version] = bucket
            folded.add(id(entry))
        entries = [e for e in entries if id(e) not in folded]
    entries.sort(
        key=lambda e: (
            e.get("operation", ""),
            e.get("time") or "",
            e.get("manager", ""),
            e.get("apiVersion", ""),
            e.get("subresource", ""),
        )
    )
    return entries


def starting_entries(given: Any, live: list[fs.Node], sub: str | None) -> list[fs.Node]:
    """``FieldManager.Update``: the request's managedFields when it sent valid ones (not on a
    subresource), ``[{}]`` to clear them, else the live object's."""
    if sub or not isinstance(given, list) or not given:
        return live
    if given == [{}]:
        return []
    if given == live:
        return live  # the stored entries themselves: shared, not copied
    out = []
    for entry in given:
        if (
            not isinstance(entry, dict)
            or entry.get("operation") not in ("Apply", "Update")
            or not entry.get("apiVersion")
            or entry.get("fieldsType") != "FieldsV1"
            or not isinstance(entry.get("fieldsV1", {}), dict)
        ):
            return live
        stamp = entry.get("time")
        out.append({**entry, "time": _rfc3339(stamp)} if isinstance(stamp, str) else dict(entry))
    return live if out == live else out


def _rfc3339(stamp: str) -> str:
    """A time as ``metav1.Time`` re-encodes it (clients send ``+00:00`` and fractions)."""
    if len(stamp) == 20 and stamp.endswith("Z"):
        return stamp
    try:
        parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the Update operation ---------------------------------------------------------------------

# StripMetaManager: never owned by anyone.
STRIPPED_META = frozenset(
    (
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "generation",
        "managedFields",
        "resourceVersion",
    )
)


def changes(
    old: fs.Node | None, new: fs.Node, schema: fs.Node, sub: str | None, has_status: bool, crd: bool
) -> tuple[list[fs.Path], list[fs.Path]]:
    """What a write changed, as the field manager counts it: server-set metadata stripped, and the
    status of a kind with a status subresource only through /status (its reset fields)."""
    if old is None:  # a Go object starts with its struct-typed fields present and empty, so a
        # create adds ``spec`` without owning the map itself; a custom resource starts empty
        base: fs.Node = {} if crd else {k: {} for k in ("spec", "status") if isinstance(new.get(k), dict)}
    else:
        base = old
    changed: list[fs.Path] = []
    removed: list[fs.Path] = []
    for key in base.keys() | new.keys():
        if key in ("apiVersion", "kind"):
            continue
        if (key == "status") != (sub == "status") and (sub == "status" or has_status):
            continue  # /status writes only status; the object's status is reset by its strategy
        lv, rv = base.get(key, fs.MISSING), new.get(key, fs.MISSING)
        if lv is rv or (lv is not fs.MISSING and rv is not fs.MISSING and lv == rv):
            continue
        if key == "metadata":
            lm = lv if isinstance(lv, dict) else {}
            rm = rv if isinstance(rv, dict) else {}
            meta_schema = fs.child(schema, "metadata")
            for mkey in lm.keys() | rm.keys():
                if mkey in STRIPPED_META:
                    continue
                a, b = lm.get(mkey, fs.MISSING), rm.get(mkey, fs.MISSING)
                if a is not b and (a is fs.MISSING or b is fs.MISSING or a != b):
                    fs.walk(a, b, fs.child(meta_schema, mkey), ("f:metadata", "f:" + mkey), changed, removed)
        else:
            fs.walk(lv, rv, fs.child(schema, key), ("f:" + key,), changed, removed)
    return changed, removed


def _creation_tree(new: fs.Node, schema: fs.Node, has_status: bool, crd: bool) -> fs.Tree:
    """What a create owns, built directly (the common write: no diff, no sort needed)."""
    tree: fs.Tree = {}
    for key in sorted(new):
        if key in ("apiVersion", "kind") or (key == "status" and has_status):
            continue
        value = new[key]
        if key == "metadata":
            meta_schema = fs.child(schema, "metadata")
            node = {
                "f:" + k: fs.added(value[k], fs.child(meta_schema, k))
                for k in sorted(value)
                if k not in STRIPPED_META
            }
        else:
            node = fs.added(value, fs.child(schema, key))
            if not crd and key in ("spec", "status") and type(value) is dict:
                node.pop(".", None)  # a Go struct: present, empty, in the object a create starts from
                if not node:
                    continue
        if node or key != "metadata":
            tree["f:" + key] = node
    return tree


def record_update(
    old: fs.Node | None,
    new: fs.Node,
    schema: fs.Node,
    manager: str,
    api_version: str,
    sub: str | None,
    has_status: bool,
    crd: bool,
) -> None:
    """Set ``new``'s managedFields for an update (or, ``old`` None, a create) by ``manager``."""
    meta = new.setdefault("metadata", {})
    live = list(((old or {}).get("metadata") or {}).get("managedFields") or [])
    entries = starting_entries(meta.get("managedFields"), live, sub)
    if old is None and not entries:
        created = _creation_tree(new, schema, has_status, crd)
        if created:
            stamp = objects.now_iso()
            meta["managedFields"] = [
                make_entry(manager, "Update", api_version, stamp, created, "", presorted=True)
            ]
        else:
            meta.pop("managedFields", None)
        return
    changed, removed = changes(old, new, schema, sub, has_status, crd)
    if not changed and not removed:
        if entries:
            meta["managedFields"] = entries
        else:
            meta.pop("managedFields", None)
        return
    key = (manager, "Update", api_version, sub or "")
    drop = changed + removed
    out: list[fs.Node] = []
    mine: fs.Node | None = None
    for entry in entries:
        if ident(entry) == key:
            mine = entry
            continue
        tree: Any = entry.get("fieldsV1")
        if isinstance(tree, dict) and fs.touches(tree, drop):
            tree = loads(dumps(tree))
            for path in drop:
                fs.discard(tree, path)
            if not tree:
                continue
            entry = with_fields(entry, tree)
        out.append(entry)
    tree = loads(dumps(mine.get("fieldsV1") or {})) if mine else {}
    for path in removed:
        fs.discard(tree, path)
    for path in changed:
        fs.insert(tree, path)
    if tree:
        stamp = objects.now_iso() if changed or mine is None else (mine.get("time") or objects.now_iso())
        out.append(make_entry(manager, "Update", api_version, stamp, tree, sub or ""))
    out = finish(out)
    if out:
        meta["managedFields"] = out
    else:
        meta.pop("managedFields", None)
