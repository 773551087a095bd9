"""DELETE: preconditions, finalizers, propagation policies, graceful pod deletion, deletecollection.

What happens after (garbage collection, namespace and CRD cleanup) is the controllers' business,
as in a real cluster; this module only decides what a single delete request writes.
"""

from __future__ import annotations

import asyncio
from enum import StrEnum
from typing import Any

from mcm_sandbox.apiserver import errors, objects, views
from mcm_sandbox.apiserver.handlers import Api, compile_filter
from mcm_sandbox.apiserver.resources import ResourceType
from mcm_sandbox.apiserver.store import DELETED, MODIFIED, Entry

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
POLICIES = ("Orphan", "Foreground", "Background")


class PodGraceMode(StrEnum):
    """Who ends a pod's graceful deletion: the grace timer, a (simulated) kubelet, or nobody (immediate)."""

    TIMER = "timer"
    KUBELET = "kubelet"
    IMMEDIATE = "immediate"


def delete_options(body: Any, query: dict[str, str]) -> dict[str, Any]:
    """DeleteOptions from the body, with query parameters (kubectl sends those) taking part too."""
    opts: dict[str, Any] = dict(body) if isinstance(body, dict) else {}
    if "gracePeriodSeconds" in query:
        try:
            opts["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
        except ValueError as exc:
            raise errors.bad_request(f"invalid gracePeriodSeconds: {query['gracePeriodSeconds']!r}") from exc
    if "propagationPolicy" in query:
        opts["propagationPolicy"] = query["propagationPolicy"]
    if "orphanDependents" in query:
        opts["orphanDependents"] = query["orphanDependents"].lower() == "true"
    return opts


def propagation(opts: dict[str, Any]) -> str | None:
    policy = opts.get("propagationPolicy")
    if policy is None and opts.get("orphanDependents") is not None:
        policy = "Orphan" if opts["orphanDependents"] else "Background"
    if policy is not None and policy not in POLICIES:
        raise errors.invalid(
            "DeleteOptions",
            "",
            "",
            [
                errors.cause(
                    "propagationPolicy",
                    f'Unsupported value: "{policy}": supported values: "Foreground", "Background", '
                    '"Orphan", "nil"',
                    "FieldValueNotSupported",
                )
            ],
        )
    return policy


class Deleter:
    def __init__(self, api: Api, pod_grace_mode: PodGraceMode = PodGraceMode.TIMER) -> None:
        self.api = api
        self.store = api.store
        self.pod_grace_mode = pod_grace_mode

    def delete(
        self, rt: ResourceType, namespace: str | None, name: str, opts: dict[str, Any], dry_run: bool = False
    ) -> tuple[int, Any]:
        """The status code and body of a DELETE: the object while it lingers, else as the type returns."""
        entry = self.api.must_get(rt, namespace, name)
        removed, after = self.delete_entry(rt, entry, opts, dry_run)
        if removed and not rt.returns_deleted_object:
            details = errors.details_of(name, rt.group, rt.plural, uid=entry.meta.get("uid", ""))
            return 200, errors.success(details)
        return 200, views.raw(rt.view, after)

    def delete_entry(
        self, rt: ResourceType, old: Entry, opts: dict[str, Any], dry_run: bool = False
    ) -> tuple[bool, Entry]:
        meta = old.meta
        self._check_preconditions(rt, meta, opts.get("preconditions") or {})
        policy = propagation(opts)
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Orphan":
            finalizers = [f for f in finalizers if f != FOREGROUND] + (
                [] if ORPHAN in finalizers else [ORPHAN]
            )
        elif policy == "Foreground":
            finalizers = [f for f in finalizers if f != ORPHAN] + (
                [] if FOREGROUND in finalizers else [FOREGROUND]
            )
        elif policy == "Background" and meta.get("deletionTimestamp"):
            finalizers = [f for f in finalizers if f not in (ORPHAN, FOREGROUND)]
        grace = self._grace(rt, old.obj, opts)
        new = old.clone()
        new_meta = new["metadata"]
        if finalizers:
            new_meta["finalizers"] = finalizers
        else:
            new_meta.pop("finalizers", None)
        if meta.get("deletionTimestamp"):
            # Already deleting: only a shorter pod grace period or new finalizers change anything.
            current = int(meta.get("deletionGracePeriodSeconds") or 0)
            if rt.storage == "pods" and grace < current:
                new_meta["deletionGracePeriodSeconds"] = grace
                new_meta["deletionTimestamp"] = objects.now_iso(grace)
        else:
            new_meta["deletionTimestamp"] = objects.now_iso(grace)
            new_meta["deletionGracePeriodSeconds"] = grace
            # upstream's BeforeDelete/markAsDeleting: the first deletionTimestamp bumps a generation
            # (controllers, upstream MCM's among them, skip updates whose generation is unchanged)
            if int(meta.get("generation") or 0) > 0:
                new_meta["generation"] = int(meta["generation"]) + 1
            if rt.storage == "namespaces":
                new.setdefault("status", {})["phase"] = "Terminating"
        if objects.same_content(new, old.obj):
            return False, old
        event_type = DELETED if objects.ready_to_remove(rt, new) else MODIFIED
        if event_type == DELETED and not meta.get("deletionTimestamp"):
            new = old.clone()  # removed at once: watchers see the last stored state, as upstream
        if dry_run:
            return event_type == DELETED, Entry(new, old.raw)
        entry = self.store.commit(rt.storage, event_type, new, old)
        self.api.admission.committed(rt, entry, event_type)
        if (
            event_type == MODIFIED
            and rt.storage == "pods"
            and grace > 0
            and self.pod_grace_mode == PodGraceMode.TIMER
        ):
            asyncio.get_running_loop().call_later(grace, self._grace_elapsed, rt, entry.meta)
        return event_type == DELETED, entry

    def _check_preconditions(self, rt: ResourceType, meta: dict[str, Any], pre: dict[str, Any]) -> None:
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise errors.conflict(
                rt.plural,
                rt.group,
                meta["name"],
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
                f"{meta.get('uid')}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
            raise errors.conflict(
                rt.plural,
                rt.group,
                meta["name"],
                f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
            )

    def _grace(self, rt: ResourceType, obj: dict[str, Any], opts: dict[str, Any]) -> int:
        """Seconds a deletion waits: pods only, and not for unscheduled or finished pods (as upstream)."""
        if rt.storage != "pods" or self.pod_grace_mode == PodGraceMode.IMMEDIATE:
            return 0
        spec = obj.get("spec") or {}
        grace = opts.get("gracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        try:
            grace = max(0, int(grace))
        except (TypeError, ValueError) as exc:
            raise errors.bad_request(f"invalid gracePeriodSeconds: {grace!r}") from exc
        if not spec.get("nodeName") or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        return grace

    def _grace_elapsed(self, rt: ResourceType, meta: dict[str, Any]) -> None:
        """The timer mode's stand-in for the kubelet: end the pod's grace period once it has run out."""
        entry = self.store.get(rt.storage, meta.get("namespace", ""), meta["name"])
        if (
            entry is None
            or entry.meta.get("uid") != meta.get("uid")
            or not entry.meta.get("deletionTimestamp")
        ):
            return
        if entry.meta.get("deletionTimestamp") != meta.get("deletionTimestamp"):
            return  # shortened meanwhile: a later timer handles it
        new = entry.clone()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        self.api.system_update(rt, entry, new, manager=None)  # the kubelet's DELETE: no field manager

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        query: dict[str, str],
        opts: dict[str, Any],
        dry_run: bool,
    ) -> dict[str, Any]:
        flt = compile_filter(rt, query.get("labelSelector", ""), query.get("fieldSelector", ""))
        for entry in self.api.list_entries(rt, namespace, flt):
            current = self.store.get(rt.storage, entry.meta.get("namespace", ""), entry.meta["name"])
            if current is not None:
                self.delete_entry(rt, current, opts, dry_run)
        return errors.success()
