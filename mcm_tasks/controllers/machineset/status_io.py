"""The MachineSet's status, written: the status ``status.py`` computes, put when it changed, computed
again for the set read afresh on a Conflict.
"""

from __future__ import annotations

from collections.abc import Callable

from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.api import MachineSet, MachineSetStatus
from mcm_tasks.controllers.machineset.status import status_changed
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import is_conflict, is_not_found


def reread_on_conflict(api: ApiClient, current: list[MachineSet], err: Exception) -> None:
    """A write of ``current[0]`` met ``err``: on a Conflict, hold the set as the API server has it
    now, for ``ops.retry_on_conflict``'s next attempt to work on."""
    if is_conflict(err):
        obj = current[0]
        fresh = ops.get(api, kinds.MACHINE_SET.resource, obj.metadata.name or "", obj.metadata.namespace)
        current[0] = MachineSet.model_validate(fresh)


def update_machine_set_status(
    api: ApiClient, machine_set: MachineSet, compute: Callable[[MachineSet], MachineSetStatus]
) -> MachineSet | None:
    """Write the status ``compute`` gives for the set, if it changed; on a Conflict the set is read
    afresh and the status computed again for it. None when the set is gone.

    Upstream: ``updateMachineSetStatus``.
    """
    current: list[MachineSet] = [machine_set]

    def attempt() -> MachineSet:
        obj = current[0]
        new = compute(obj)
        if not status_changed(obj, new):
            return obj
        try:
            written = ops.update_status(api, kinds.MACHINE_SET.resource, obj.status_body(new))
            return MachineSet.model_validate(written)
        except Exception as err:
            reread_on_conflict(api, current, err)
            raise

    try:
        return ops.retry_on_conflict(attempt)
    except Exception as err:
        if is_not_found(err):
            return None
        raise
