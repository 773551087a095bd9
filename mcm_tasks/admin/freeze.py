"""``admin freeze`` / ``admin unfreeze``: MCM's safety levers, pulled by hand.

- freeze puts MCM's ``freeze: "True"`` label on a MachineSet or MachineDeployment, as the
  overshooting safety job does (on a MachineSet it blocks scale-up; on a MachineDeployment it marks
  it frozen). Like upstream's, a label the overshooting job finds below its lower threshold is lifted
  on its next pass: a manual freeze holds for an overshoot, not forever.
- unfreeze sets the ``safety.machine.sapcloud.io/unfreeze`` annotation, which the overshooting job
  honours by removing label, Frozen condition and annotation (with its UnfrozeMachineSet Event), and
  runs that job now rather than at its next period.
Both then enqueue the object so its controller acts on the change at once.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from mcm_tasks.admin.keys import NotFound
from mcm_tasks.admin.tenants import clients
from mcm_tasks.api.constants import FREEZE_LABEL_KEY, FREEZE_LABEL_VALUE, UNFREEZE_ANNOTATION
from mcm_tasks.controllers.safety import OVERSHOOTING
from mcm_tasks.kinds import MACHINE_DEPLOYMENT, MACHINE_SET, Queue
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import is_not_found
from mcm_tasks.queue import enqueue
from mcm_tasks.settings import get_settings

FREEZABLE = {Queue.MACHINE_SET.value: MACHINE_SET, Queue.MACHINE_DEPLOYMENT.value: MACHINE_DEPLOYMENT}


def split_key(key: str) -> tuple[str, str]:
    """``namespace/name``, or a bare name in the configured namespace."""
    namespace, _, name = key.rpartition("/")
    return namespace or get_settings().namespace, name


def set_frozen(kind: str, key: str, frozen: bool) -> dict[str, Any]:
    """Patch the object; its metadata after the patch."""
    found = FREEZABLE.get(kind)
    if found is None:
        raise NotFound(f"only {' and '.join(FREEZABLE)} can be frozen, not {kind!r}")
    namespace, name = split_key(key)
    if frozen:
        body: dict[str, Any] = {"metadata": {"labels": {FREEZE_LABEL_KEY: FREEZE_LABEL_VALUE},
                                             "annotations": {UNFREEZE_ANNOTATION: None}}}  # fmt: skip
    else:
        body = {"metadata": {"annotations": {UNFREEZE_ANNOTATION: "True"}}}
    with clients() as clusters:
        try:
            written = ops.patch(clusters.control.api, found.resource, name, body, namespace)
        except ApiException as err:
            if is_not_found(err):
                raise NotFound(f"no {kind} {namespace}/{name} on the control cluster") from None
            raise
    if not frozen:
        enqueue(Queue.SAFETY, OVERSHOOTING)
    enqueue(kind, f"{namespace}/{name}")
    metadata: dict[str, Any] = written.get("metadata") or {}
    return metadata
