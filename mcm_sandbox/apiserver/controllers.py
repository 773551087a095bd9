"""The cluster-side controllers a bare API server leans on: garbage collector, namespace and CRD cleanup.

They react to committed events after the request that caused them has been answered, as the real
ones do, so clients see the same intermediate states (an owner with ``foregroundDeletion``, a
Terminating namespace) and wait for the outcome the same way.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcm_sandbox.apiserver.admission import CRD_CLEANUP_FINALIZER, CRD_STORAGE
from mcm_sandbox.apiserver.deletion import FOREGROUND, ORPHAN, Deleter
from mcm_sandbox.apiserver.resources import ResourceType
from mcm_sandbox.apiserver.store import ADDED, DELETED, Entry, Event, Key

BATCH = 500


class Controllers:
    def __init__(self, deleter: Deleter) -> None:
        self.deleter = deleter
        self.api = deleter.api
        self.store = deleter.store
        self.registry = deleter.api.registry
        self._pending: list[Event] = []
        self._scheduled = False
        self.store.listeners.append(self._on_event)

    def _on_event(self, event: Event) -> None:
        meta = event.entry.meta
        interesting = event.type == DELETED or meta.get("deletionTimestamp") or meta.get("ownerReferences")
        if not interesting:
            return
        self._pending.append(event)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        batch, self._pending = self._pending[:BATCH], self._pending[BATCH:]
        for event in batch:
            self._handle(event)
        self._scheduled = bool(self._pending)
        if self._scheduled:
            asyncio.get_running_loop().call_soon(self._run)

    def _rt(self, storage: str) -> ResourceType | None:
        found = self.registry.by_storage(storage)
        return found[0] if found else None

    def _current(self, event: Event) -> Entry | None:
        meta = event.entry.meta
        entry = self.store.get(event.storage, meta.get("namespace", ""), meta["name"])
        return entry if entry is not None and entry.meta.get("uid") == meta.get("uid") else None

    def _handle(self, event: Event) -> None:
        meta = event.entry.meta
        if event.type == DELETED:
            self._owner_gone(meta.get("uid", ""))
            for ref in meta.get("ownerReferences") or []:
                self._check_foreground_done(ref.get("uid", ""))
            if event.namespace:
                self._check_namespace_done(event.namespace)
            if event.storage != CRD_STORAGE and "." in event.storage:
                self._check_crd_done(event.storage)
            return
        entry = self._current(event)
        if entry is None:
            return
        if entry.meta.get("deletionTimestamp"):
            self._deleting(event.storage, entry)
        elif (
            event.type == ADDED
            or event.old is None
            or event.old.meta.get("ownerReferences") != entry.meta.get("ownerReferences")
        ):
            self._check_dangling(event.storage, entry)

    # --- garbage collection ------------------------------------------------------------------

    def _owner_exists(self, ref: dict[str, Any]) -> bool:
        """An owner of a kind nobody serves counts as present: upstream's GC cannot resolve it, so it
        leaves the dependent alone rather than deleting on a guess."""
        if not self.registry.kind_served(ref.get("apiVersion", ""), ref.get("kind", "")):
            return True
        owner = self.store.get_by_uid(ref.get("uid", ""))
        return owner is not None and owner.meta.get("name") == ref.get("name")

    def _check_dangling(self, storage: str, entry: Entry) -> None:
        refs = entry.meta.get("ownerReferences") or []
        if refs and not any(self._owner_exists(r) for r in refs):
            self._delete(storage, entry, "Background")

    def _owner_gone(self, uid: str) -> None:
        for key in list(self.store.dependents.get(uid, ())):
            entry = self.store.get(*key)
            if entry is None:
                continue
            refs = entry.meta.get("ownerReferences") or []
            if any(r.get("uid") != uid and self._owner_exists(r) for r in refs):
                self._drop_owner_refs(key, entry, {uid})
            else:
                self._delete(key[0], entry, "Background")

    def _deleting(self, storage: str, entry: Entry) -> None:
        finalizers = entry.meta.get("finalizers") or []
        uid = entry.meta.get("uid", "")
        if ORPHAN in finalizers:
            for key in list(self.store.dependents.get(uid, ())):
                dep = self.store.get(*key)
                if dep is not None:
                    self._drop_owner_refs(key, dep, {uid})
            self._remove_finalizer(storage, entry, ORPHAN)
        elif FOREGROUND in finalizers:
            for key in list(self.store.dependents.get(uid, ())):
                dep = self.store.get(*key)
                if dep is not None and not dep.meta.get("deletionTimestamp"):
                    self._delete(key[0], dep, "Foreground")
            self._check_foreground_done(uid)
        if storage == "namespaces":
            self._empty_namespace(entry.meta["name"])
        elif storage == CRD_STORAGE:
            self._empty_crd(entry)

    def _check_foreground_done(self, owner_uid: str) -> None:
        owner = self.store.get_by_uid(owner_uid)
        if owner is None or FOREGROUND not in (owner.meta.get("finalizers") or []):
            return
        if not owner.meta.get("deletionTimestamp") or self.store.dependents.get(owner_uid):
            return
        key = self.store.by_uid[owner_uid]
        self._remove_finalizer(key[0], owner, FOREGROUND)

    def _drop_owner_refs(self, key: Key, entry: Entry, uids: set[str]) -> None:
        rt = self._rt(key[0])
        if rt is None:
            return
        new = entry.clone()
        refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") not in uids]
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self.api.system_update(rt, entry, new)

    def _remove_finalizer(self, storage: str, entry: Entry, finalizer: str) -> None:
        rt = self._rt(storage)
        if rt is None:
            return
        new = entry.clone()
        new["metadata"]["finalizers"] = [f for f in new["metadata"].get("finalizers") or [] if f != finalizer]
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
        self.api.system_update(rt, entry, new)

    def _delete(self, storage: str, entry: Entry, policy: str) -> None:
        rt = self._rt(storage)
        if rt is not None and not entry.meta.get("deletionTimestamp"):
            self.deleter.delete_entry(rt, entry, {"propagationPolicy": policy})

    # --- namespaces and CRDs -----------------------------------------------------------------

    def _empty_namespace(self, namespace: str) -> None:
        for storage in self.registry.namespaced_storages():
            for entry in list(self.store.iter(storage, namespace)):
                self._delete(storage, entry, "Background")
        self._check_namespace_done(namespace)

    def _check_namespace_done(self, namespace: str) -> None:
        ns = self.store.get("namespaces", "", namespace)
        if ns is None or not ns.meta.get("deletionTimestamp"):
            return
        if any(self.store.data.get(s, {}).get(namespace) for s in self.store.data if s != "namespaces"):
            return
        spec_finalizers = (ns.obj.get("spec") or {}).get("finalizers") or []
        if "kubernetes" not in spec_finalizers:
            return
        rt = self._rt("namespaces")
        assert rt is not None
        new = ns.clone()
        new["spec"]["finalizers"] = [f for f in spec_finalizers if f != "kubernetes"]
        self.api.system_update(rt, ns, new)

    def _empty_crd(self, crd: Entry) -> None:
        storage = crd.meta["name"]
        for entry in list(self.store.iter(storage)):
            self._delete(storage, entry, "Background")
        self._check_crd_done(storage)

    def _check_crd_done(self, storage: str) -> None:
        crd = self.store.get(CRD_STORAGE, "", storage)
        if crd is None or not crd.meta.get("deletionTimestamp") or self.store.data.get(storage):
            return
        if CRD_CLEANUP_FINALIZER in (crd.meta.get("finalizers") or []):
            self._remove_finalizer(CRD_STORAGE, crd, CRD_CLEANUP_FINALIZER)
