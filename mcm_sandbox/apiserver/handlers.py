"""Create, read, update, patch and list: the verbs, over the store, without HTTP.

Each method validates, computes the new object and commits it with no ``await`` in between, which
is what makes resourceVersion preconditions a true compare-and-swap on the single event loop.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from typing import Any

from mcm_sandbox.apiserver import errors, objects, spec_rules, validation, views
from mcm_sandbox.apiserver.admission import Admission
from mcm_sandbox.apiserver.resources import Registry, ResourceType
from mcm_sandbox.apiserver.store import ADDED, DELETED, MODIFIED, Entry, Store, dumps, loads

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
#: The field manager of the emulated kube-controller-manager's writes (its user agent's product).
CONTROLLER_MANAGER = "kube-controller-manager"


@dataclass
class Filter:
    """A compiled label and field selector pair (None when the request gave none)."""

    label: Any = None
    field: Any = None

    def matches(self, obj: dict[str, Any]) -> bool:
        if self.label is not None and not self.label.matches((obj.get("metadata") or {}).get("labels") or {}):
            return False
        return self.field is None or bool(self.field.matches(obj))

    @property
    def empty(self) -> bool:
        return self.label is None and self.field is None


def compile_filter(rt: ResourceType, label_selector: str, field_selector: str) -> Filter:
    flt = Filter()
    if label_selector:
        from mcm_sandbox import selectors

        try:
            flt.label = selectors.parse_label_selector(label_selector)
        except selectors.SelectorError as exc:
            raise errors.bad_request(str(exc)) from exc
    if field_selector:
        from mcm_sandbox import selectors

        try:
            flt.field = selectors.parse_field_selector(field_selector, rt.field_selectors())
        except selectors.SelectorError as exc:
            raise errors.bad_request(str(exc)) from exc
    return flt


class Api:
    def __init__(self, store: Store, registry: Registry, admission: Admission) -> None:
        self.store = store
        self.registry = registry
        self.admission = admission
        # Warnings of the request being served (unknown fields): the HTTP edge sends them as
        # ``Warning`` headers. One event loop, no await between a write and reading these.
        self.warnings: list[str] = []

    # --- reads -------------------------------------------------------------------------------

    def must_get(self, rt: ResourceType, namespace: str | None, name: str) -> Entry:
        entry = self.store.get(rt.storage, namespace or "", name)
        if entry is None:
            raise errors.not_found(rt.plural, rt.group, name)
        return entry

    def list_entries(self, rt: ResourceType, namespace: str | None, flt: Filter) -> list[Entry]:
        entries = self.store.sorted_entries(rt.storage, namespace)
        if flt.empty:
            return entries
        return [e for e in entries if flt.matches(e.obj)]

    def list(
        self, rt: ResourceType, namespace: str | None, query: dict[str, str]
    ) -> tuple[list[Entry], bytes, dict[str, Any]]:
        """Items and the encoded list; limit/continue page over a snapshot taken by the first page.

        ``resourceVersion=0`` (any version will do) without a continue token is served whole, the
        limit ignored, as kube-apiserver's watch cache serves it (the cacher delegates a list to etcd,
        where limits apply, only when resourceVersion is not "0"): a Go reflector's first list
        (``resourceVersion=0&limit=500``) gets every object in one response."""
        flt = compile_filter(rt, query.get("labelSelector", ""), query.get("fieldSelector", ""))
        limit = _int_param(query, "limit")
        token = query.get("continue", "")
        if query.get("resourceVersion") == "0" and not token:
            limit = 0
        if token:
            snap_id, offset, rv = _decode_continue(token)
            entries = self.store.snapshot(snap_id)
            if entries is None:
                raise errors.expired(
                    "The provided continue parameter is too old to display a consistent list result. You can "
                    "start a new list without the continue parameter."
                )
        else:
            entries, snap_id, offset, rv = self.list_entries(rt, namespace, flt), "", 0, self.store.rv
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        page = entries[offset:]
        if limit and len(page) > limit:
            page = page[:limit]
            if not snap_id:
                snap_id = secrets.token_hex(8)
                self.store.save_snapshot(snap_id, entries)
            meta["continue"] = _encode_continue(snap_id, offset + limit, rv)
            meta["remainingItemCount"] = len(entries) - offset - limit
        head = dumps({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta})
        items = b",".join(views.raw(rt.view, e) for e in page)
        return page, head[:-1] + b',"items":[' + items + b"]}", meta

    # --- create ------------------------------------------------------------------------------

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: Any,
        dry_run: bool = False,
        field_validation: str = "",
        manager: str | None = None,
    ) -> Entry:
        """Store a new object; ``manager`` (None: managedFields already made, by an apply) owns its fields."""
        body = views.from_view(rt.view, objects.check_body(rt, body))
        self.warnings = validation.decode_check(rt, body, field_validation)
        if rt.namespaced:
            self.admission.check_namespace_writable(namespace or "", body)
        objects.prepare_create(rt, body, namespace)
        meta = body["metadata"]
        causes = validation.metadata_causes(meta)
        if causes:
            raise errors.invalid(rt.kind, rt.group, meta["name"], causes)
        for _ in range(8):
            if self.store.get(rt.storage, meta.get("namespace", ""), meta["name"]) is None:
                break
            if not meta.get("generateName"):
                raise errors.already_exists(rt.plural, rt.group, meta["name"])
            meta["name"] = objects.generate_name(meta["generateName"])
        else:
            raise errors.already_exists(rt.plural, rt.group, meta["name"])
        self.admission.default(rt, body, None)
        causes = spec_rules.causes(rt, body)
        if causes:
            raise errors.invalid(rt.kind, rt.group, meta["name"], causes)
        self.admission.guard_escalation(rt, body)
        self.admission.on_create(rt, body)
        if manager is not None:
            _record(rt, None, body, manager, None)
        if dry_run:
            return Entry(body, dumps(body))
        entry = self.store.commit(rt.storage, ADDED, body, None)
        self.admission.committed(rt, entry, ADDED)
        return entry

    # --- update and patch --------------------------------------------------------------------

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        sub: str | None,
        dry_run: bool = False,
        manager: str = "",
        field_validation: str = "",
    ) -> Entry:
        body = views.from_view(rt.view, objects.check_body(rt, body))
        self.warnings = validation.decode_check(rt, body, field_validation)
        objects.check_name_matches(body, name, namespace if rt.namespaced else None)
        old = self.must_get(rt, namespace, name)
        self._check_rv(rt, old, body)
        return self.write_update(rt, old, body, sub, dry_run, manager=manager)

    def server_side_apply(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        raw: bytes,
        query: dict[str, str],
        sub: str | None,
        dry_run: bool = False,
    ) -> tuple[Entry, bool]:
        """PATCH with application/apply-patch+yaml: (entry, created)."""
        import yaml

        from mcm_sandbox.apiserver import apply

        manager = query.get("fieldManager", "")
        if not manager:
            raise errors.invalid(
                "PatchOptions",
                "meta.k8s.io",
                "",
                [
                    errors.cause(
                        "fieldManager", "Required value: is required for apply patch", "FieldValueRequired"
                    )
                ],
            )
        try:
            applied = check_depth(yaml.safe_load(raw))
        except RecursionError:
            raise errors.bad_request("error decoding YAML: exceeded max depth") from None
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error decoding YAML: {exc}") from exc
        if not isinstance(applied, dict) or not applied.get("apiVersion") or not applied.get("kind"):
            raise errors.bad_request("apiVersion and kind must be set in an applied configuration")
        if applied["apiVersion"] != rt.api_version:  # structuredMergeManager.Apply checks this first
            raise errors.bad_request(
                "Incorrect version specified in apply patch. "
                f"Specified patch version: {applied['apiVersion']}, expected: {rt.api_version}"
            )
        applied = objects.check_body(rt, applied)
        objects.check_name_matches(applied, name, namespace if rt.namespaced else None)
        applied["metadata"]["name"] = name
        schema = apply.schema_for(rt)
        force = query.get("force", "").lower() == "true"
        old = self.store.get(rt.storage, namespace or "", name)
        if old is None:
            created = apply.apply(
                None, applied, schema, manager, rt.api_version, force, sub, rt.status, rt.crd
            )
            return self.create(rt, namespace, created, dry_run), True
        result = apply.apply(
            old.clone(), applied, schema, manager, rt.api_version, force, sub, rt.status, rt.crd
        )
        self._check_rv(rt, old, applied)
        return self.write_update(rt, old, result, sub, dry_run, manager=None), False

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        raw: bytes,
        content_type: str,
        sub: str | None,
        dry_run: bool = False,
        manager: str = "",
        field_validation: str = "",
    ) -> Entry:
        old = self.must_get(rt, namespace, name)
        patched = check_depth(self.apply_patch(rt, views.to_view(rt.view, old.clone()), raw, content_type))
        patched = views.from_view(rt.view, objects.check_body(rt, patched))
        self.warnings = validation.decode_check(rt, patched, field_validation)
        self._check_rv(rt, old, patched)
        return self.write_update(rt, old, patched, sub, dry_run, manager=manager)

    def apply_patch(self, rt: ResourceType, current: dict[str, Any], raw: bytes, content_type: str) -> Any:
        from mcm_sandbox import patch as patching

        media = content_type.split(";")[0].strip().lower()
        if media not in (MERGE_PATCH, JSON_PATCH, STRATEGIC_PATCH):
            raise errors.unsupported_media(content_type)
        if media == STRATEGIC_PATCH and rt.crd:
            raise errors.ApiError(
                415,
                "UnsupportedMediaType",
                f"strategic merge patch is not supported for {rt.group}/{rt.version}, Kind={rt.kind}",
            )
        doc = parse_json(raw)
        try:
            if media == MERGE_PATCH:
                return patching.merge_patch(current, doc)
            if media == JSON_PATCH:
                return patching.json_patch(current, doc)
            return patching.strategic_merge_patch(current, doc, rt.kind, rt.api_version)
        except patching.PatchError as exc:
            raise errors.ApiError(exc.status_code, exc.reason or "Invalid", exc.message) from exc

    def _check_rv(self, rt: ResourceType, old: Entry, body: dict[str, Any]) -> None:
        wanted = body["metadata"].get("resourceVersion")
        if wanted and wanted != old.meta["resourceVersion"]:
            raise errors.conflict(rt.plural, rt.group, old.meta["name"], errors.STALE)
        uid = body["metadata"].get("uid")
        if uid and uid != old.meta.get("uid"):
            raise errors.conflict(
                rt.plural,
                rt.group,
                old.meta["name"],
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {old.meta.get('uid')}",
            )

    def write_update(
        self,
        rt: ResourceType,
        old: Entry,
        new: dict[str, Any],
        sub: str | None,
        dry_run: bool = False,
        system: bool = False,
        manager: str | None = None,
        subresource: str | None = None,
    ) -> Entry:
        """Commit an update computed from ``old``; a no-op writes nothing, emptied finalizers delete.

        ``manager`` (None: the caller made managedFields, or a write no field manager sees) owns
        the fields the update changed (its entry names ``subresource``, else ``sub``)."""
        if not system:  # emulated controllers write exactly what they computed from ``old``
            if sub is None:
                self.admission.default(rt, new, old.obj)
            new = objects.merge_for_update(rt, old.obj, new, sub)
            causes = validation.metadata_causes(new["metadata"]) + validation.immutability_causes(
                rt, old.obj, new
            )
            if sub is None:
                causes += spec_rules.causes(rt, new)
            if causes:
                raise errors.invalid(rt.kind, rt.group, old.meta["name"], causes)
            self.admission.guard_escalation(rt, new)
        self.admission.on_update(rt, new, old.obj, sub)
        if not system:
            objects.bump_generation(rt, old.obj, new)
        if manager is not None:
            _record(rt, old.obj, new, manager, subresource or sub)
        elif "managedFields" not in new["metadata"] and "managedFields" in old.meta:
            new["metadata"]["managedFields"] = old.meta["managedFields"]
        if objects.same_content(new, old.obj):
            return old
        if dry_run:
            return Entry(new, dumps(new))
        event_type = DELETED if objects.ready_to_remove(rt, new) else MODIFIED
        entry = self.store.commit(rt.storage, event_type, new, old)
        self.admission.committed(rt, entry, event_type)
        return entry

    # --- helpers for other parts of the server -----------------------------------------------

    def system_update(
        self,
        rt: ResourceType,
        old: Entry,
        new: dict[str, Any],
        sub: str | None = None,
        manager: str | None = CONTROLLER_MANAGER,
    ) -> Entry:
        """A write made by an emulated controller (GC, disruption, namespace): no precondition."""
        return self.write_update(rt, old, new, sub, system=True, manager=manager)


def _record(
    rt: ResourceType, old: dict[str, Any] | None, new: dict[str, Any], manager: str, sub: str | None
) -> None:
    from mcm_sandbox.apiserver import apply, managed_fields

    schema = apply.schema_for(rt)
    managed_fields.record_update(old, new, schema, manager, rt.api_version, sub, rt.status, rt.crd)


#: Deepest nesting a body may have. The sandbox keeps objects as JSON (orjson encodes at most 255
#: levels) and walks them recursively, so deeper bodies get a 400 here rather than a 500 later.
MAX_DEPTH = 128


def check_depth(doc: Any, limit: int = MAX_DEPTH) -> Any:
    """400 for a body nested deeper than ``limit`` (iterative: a hostile body cannot recurse us)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise errors.bad_request(f"error decoding request body: exceeded max depth of {limit}")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, (dict, list)))
    return doc


def parse_json(raw: bytes) -> Any:
    try:
        return check_depth(loads(raw))
    except ValueError as exc:
        raise errors.bad_request(f"error decoding request body: {exc}") from exc


def _int_param(query: dict[str, str], key: str) -> int:
    value = query.get(key, "")
    if not value:
        return 0
    try:
        return max(0, int(value))
    except ValueError as exc:
        raise errors.bad_request(f"invalid value for {key}: {value!r}") from exc


def _encode_continue(snap_id: str, offset: int, rv: int) -> str:
    return base64.urlsafe_b64encode(dumps({"s": snap_id, "o": offset, "rv": rv})).decode()


def _decode_continue(token: str) -> tuple[str, int, int]:
    try:
        data = loads(base64.urlsafe_b64decode(token.encode()))
        return str(data["s"]), int(data["o"]), int(data["rv"])
    except (ValueError, KeyError, TypeError) as exc:
        raise errors.bad_request(f"invalid continue token: {exc}") from exc
