"""Stand-ins for the machine controller, for tests and kits that run a MachineSet (or
MachineDeployment) controller without one.

The MachineSet creates every machine with the MCM finalizer in its metadata
(``mcm_tasks.controllers.machineset.control_io.new_machine``), so a deleted machine stays until the
machine controller's deletion flow removes it. Where no machine controller runs,
``finish_deletions`` does that last step in its stead.
"""

from __future__ import annotations

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.api.constants import MCM_FINALIZER
from mcm_tasks.controllers.common.finalizers import with_finalizer
from mcm_tasks.kube import ops


def finish_deletions(api: ApiClient, namespace: str) -> int:
    """Remove the MCM finalizer from each deleting machine of the namespace, as the end of the
    deletion flow does (other finalizers still hold a machine); how many were released. A machine
    gone or written since is left to the next call."""
    released = 0
    for machine in ops.list_(api, kinds.MACHINE.resource, namespace)["items"]:
        meta = machine["metadata"]
        if not meta.get("deletionTimestamp") or MCM_FINALIZER not in (meta.get("finalizers") or ()):
            continue
        rest = with_finalizer(meta["finalizers"], MCM_FINALIZER, False)
        body = {"metadata": {"finalizers": rest or None, "resourceVersion": meta["resourceVersion"]}}
        try:
            ops.patch(api, kinds.MACHINE.resource, meta["name"], body, namespace)
        except ApiException as err:
            if err.status in (404, 409):
                continue
            raise
        released += 1
    return released
