"""The eviction subresource and the disruption controller's half that keeps PDB status current.

The decisions are ``policy``'s (pure); this module reads the pods and budgets, stores the results
and deletes the evicted pod, recomputing a namespace's budgets whenever its pods or budgets change.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from mcm_sandbox import policy
from mcm_sandbox.apiserver import errors
from mcm_sandbox.apiserver.deletion import Deleter, delete_options
from mcm_sandbox.apiserver.resources import ResourceType
from mcm_sandbox.apiserver.store import Event

PDB_STORAGE = "poddisruptionbudgets.policy"
EVICTION_VERSIONS = ("policy/v1", "policy/v1beta1")
# How often budgets with recorded evictions are re-synced, so expired entries drop out.
DISRUPTED_RESYNC_SECONDS = 15.0


class Disruption:
    def __init__(self, deleter: Deleter) -> None:
        self.deleter = deleter
        self.api = deleter.api
        self.store = deleter.store
        pdb_rt = self.api.registry.get("policy", "v1", "poddisruptionbudgets")
        assert pdb_rt is not None
        self.pdb_rt: ResourceType = pdb_rt
        self._dirty: set[str] = set()
        self.store.listeners.append(self._on_event)

    # --- PDB status --------------------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        if event.storage == PDB_STORAGE or (
            event.storage == "pods" and self.store.data.get(PDB_STORAGE, {}).get(event.namespace)
        ):
            self.mark(event.namespace)

    def mark(self, namespace: str) -> None:
        if not self._dirty:
            asyncio.get_running_loop().call_soon(self._sync)
        self._dirty.add(namespace)

    def _sync(self) -> None:
        dirty, self._dirty = self._dirty, set()
        now = datetime.now(UTC)
        for namespace in dirty:
            pods = [e.obj for e in self.store.iter("pods", namespace)]
            for entry in list(self.store.iter(PDB_STORAGE, namespace)):
                status = policy.pdb_status(entry.obj, pods, now)
                if status.get("disruptedPods"):
                    asyncio.get_running_loop().call_later(DISRUPTED_RESYNC_SECONDS, self.mark, namespace)
                if status != entry.obj.get("status"):
                    new = entry.clone()
                    new["status"] = status
                    self.api.system_update(self.pdb_rt, entry, new, "status")

    # --- eviction ----------------------------------------------------------------------------

    def evict(
        self, rt: ResourceType, namespace: str, name: str, body: Any, dry_run: bool = False
    ) -> tuple[dict[str, Any], int]:
        if (
            not isinstance(body, dict)
            or body.get("kind") not in (None, "Eviction")
            or body.get("apiVersion") not in (None, *EVICTION_VERSIONS)
        ):
            raise errors.bad_request("the body of the request must be a policy/v1 Eviction")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        pod = self.api.must_get(rt, namespace, name)
        pdbs = [e.obj for e in self.store.iter(PDB_STORAGE, namespace)]
        decision = policy.eviction_decision(pod.obj, pdbs)
        if not decision.allowed:
            status = decision.status()
            headers = (
                {"Retry-After": str(decision.retry_after_seconds)} if decision.retry_after_seconds else None
            )
            raise errors.ApiError(
                decision.code,
                status.get("reason") or "InternalError",
                status["message"],
                status.get("details"),
                headers,
            )
        opts = delete_options(body.get("deleteOptions"), {})
        if decision.require_resource_version:
            opts["preconditions"] = {
                **(opts.get("preconditions") or {}),
                "resourceVersion": pod.meta["resourceVersion"],
            }
        if decision.decrement and not dry_run:
            pdb = self.store.get(PDB_STORAGE, namespace, decision.pdb_name)
            if pdb is not None:
                new = pdb.clone()
                new["status"] = policy.record_eviction(pdb.obj, name, datetime.now(UTC))
                self.api.system_update(self.pdb_rt, pdb, new, "status")
        self.deleter.delete_entry(rt, pod, opts, dry_run)
        return {**decision.status(), "code": 201}, 201
