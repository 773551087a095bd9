"""Writing a finalizer change (``finalizers.finalizers_patch``) for the passes whose only write it is:
the MachineClass, Secret and Node passes (upstream ``addMachineClassFinalizers``,
``addSecretFinalizers``, ``addNodeFinalizers`` and their delete counterparts).

The patch is guarded by the resourceVersion the pass read from the mirror, so an object written
since (another pass's finalizer, a user's edit, a kubelet's status) answers 409 Conflict. That is
optimistic concurrency at work, not a failure: the object is read once from the API server and the
same change tried again on that version, as upstream re-reads before it writes; a second Conflict
brings the pass back soon (``Requeue.conflict``) instead of raising into the queue's failure path (a
``ReconcileFailed`` Warning on the object and a backoff). Reading live only after a Conflict keeps
a lagging mirror from turning into a write refused every ``--conflict-retry``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks.controllers.common.finalizers import finalizers_patch
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import is_conflict
from mcm_tasks.kube.resources import Resource

log = logging.getLogger(__name__)


def write_finalizers(
    api: ApiClient,
    resource: Resource,
    name: str,
    namespace: str | None,
    meta: Mapping[str, Any],
    *,
    add: str | None = None,
    remove: str | None = None,
) -> bool:
    """Add or remove one finalizer on the object whose metadata (API dict) the pass read, through
    ``ops.retry_on_conflict`` with two attempts: the version read, then a live read. True when
    written or nothing was to change (or the object is gone), False after the second Conflict. Any
    other error is raised."""
    read: list[Mapping[str, Any] | None] = [meta]

    def attempt() -> None:
        current = read[0]
        if current is None:  # gone since: nothing to hold
            return
        patch = finalizers_patch(
            list(current.get("finalizers") or ()), current.get("resourceVersion"), add=add, remove=remove
        )
        if patch is None:
            return
        try:
            ops.patch(api, resource, name, patch, namespace)
        except ApiException as err:
            if is_conflict(err):
                live = ops.get(api, resource, name, namespace, missing_ok=True)
                read[0] = None if live is None else (live.get("metadata") or {})
            raise

    try:
        ops.retry_on_conflict(attempt, attempts=2)
    except ApiException as err:
        if not is_conflict(err):
            raise
        log.debug("%s %s/%s: written again meanwhile; deciding again soon", resource.kind, namespace, name)
        return False
    return True
