"""Writing a finalizer change (``finalizers.finalizers_patch``) for the passes whose only write it is:
the MachineClass, Secret and Node passes (upstream ``addMachineClassFinalizers``,
``addSecretFinalizers``, ``addNodeFinalizers`` and their delete counterparts).

The patch is guarded by the resourceVersion the pass read from the mirror, so an object written
since (another pass's finalizer, a user's edit, a kubelet's status) answers 409 Conflict. That is
optimistic concurrency at work, not a failure: the pass comes back soon (``Requeue.conflict``) and
decides again on a fresh read, as the Machine, MachineSet and MachineDeployment passes do, instead of
raising into the queue's failure path (a ``ReconcileFailed`` Warning on the object and a backoff).
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import is_conflict
from mcm_tasks.kube.resources import Resource

log = logging.getLogger(__name__)


def write_finalizers(
    api: ApiClient, resource: Resource, name: str, namespace: str | None, patch: dict[str, Any]
) -> bool:
    """PATCH ``patch`` onto the object; False when it was written since the version the patch guards
    on (a Conflict), True when written. Any other error is raised."""
    try:
        ops.patch(api, resource, name, patch, namespace)
    except ApiException as err:
        if not is_conflict(err):
            raise
        log.debug("%s %s/%s: written since it was read; deciding again soon", resource.kind, namespace, name)
        return False
    return True
