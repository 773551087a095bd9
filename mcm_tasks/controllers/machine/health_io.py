"""The health check's edges (upstream ``reconcileMachineHealth``, ``syncMachineNodeTemplates``): read the
node, write what ``health`` decided, mark machines Failed through the permit giver, and keep the node in
sync with the machine.

After a health status write the reconcile goes on to the node sync in the same task (upstream stops
and comes back after ShortRetry): the two write different objects, so nothing is gained by waiting.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineOperationType, MachinePhase, MachineState, MachineStatus, now_utc
from mcm_tasks.api.constants import (
    MACHINE_DEPLOYMENT_NAME_LABEL_KEY,
    MACHINE_JOIN_DURATION_ANNOTATION,
    NODE_LABEL_KEY,
    USER_DATA_SECRET_KEY,
)
from mcm_tasks.controllers.common import context
from mcm_tasks.controllers.common.context import ClassContext
from mcm_tasks.controllers.common.status import last_operation, updated_status, write_status
from mcm_tasks.controllers.machine import bootstrap, metrics
from mcm_tasks.controllers.machine.health import (
    MAX_REPLACEMENTS,
    can_mark_failed,
    decide_health,
    not_marked_description,
)
from mcm_tasks.controllers.machine.nodesync import node_sync_patch, virtual_capacity_patches
from mcm_tasks.durations import format_duration
from mcm_tasks.kube import ops
from mcm_tasks.permits import get_permit_giver
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import get_settings
from mcm_tasks.tracing import record_span

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: how long a health check waits for the deployment's permit (MCM's lockAcquireTimeout)
PERMIT_TIMEOUT: Final = 1.0


def reconcile_health(
    machine: Machine, cc: ClassContext | None, node: Obj | None
) -> tuple[Machine, Requeue | None]:
    """Run the health check on the machine's ``node`` (as the pass read it); the machine as it is
    now and when to come back (None: no timer needed)."""
    settings = get_settings()
    decision = decide_health(machine, node, now_utc(), settings)
    if decision.status is None:
        recheck = None if decision.recheck_after is None else Requeue(decision.recheck_after)
        return machine, recheck
    if decision.failed_by_health_timeout:
        return machine, mark_failed(machine, decision.status)
    written = write_status(machine, decision.status) or machine
    if decision.joined:
        _after_join(written, cc)
    phase = written.status.current_status.phase
    if phase in (MachinePhase.PENDING, MachinePhase.UNKNOWN):
        return written, Requeue(settings.health_recheck_period)
    return written, None


def _after_join(machine: Machine, cc: ClassContext | None) -> None:
    """First join: the bootstrap token has served its purpose; note how long joining took."""
    target = context.target_api()
    user_data = cc.secret.data.get(USER_DATA_SECRET_KEY, b"") if cc is not None else b""
    if target is not None and bootstrap.needs_token(user_data):
        try:
            bootstrap.delete_token(target, machine.metadata.name or "")
        except Exception as err:  # best effort, as upstream: the token expires anyway
            log.warning("machine %s: could not delete its bootstrap token: %s", machine.key, err)
    created = machine.metadata.creation_timestamp
    if created is None or MACHINE_JOIN_DURATION_ANNOTATION in machine.metadata.annotations:
        return
    seconds = max((now_utc() - created).total_seconds(), 0.0)
    metrics.observe_duration("join", machine, seconds, cc.machine_class if cc is not None else None)
    now_ns = time.time_ns()
    record_span("Join", machine.metadata.uid or "", now_ns - int(seconds * 1e9), now_ns,
                machine_key=machine.key, node=machine.metadata.labels.get(NODE_LABEL_KEY))  # fmt: skip
    patch = {"metadata": {"annotations": {MACHINE_JOIN_DURATION_ANNOTATION: format_duration(round(seconds))}}}
    ops.patch(
        context.control_api(),
        kinds.MACHINE.resource,
        machine.metadata.name or "",
        patch,
        machine.metadata.namespace,
    )


def mark_failed(machine: Machine, failed: MachineStatus) -> Requeue:
    """Mark a machine Failed after its health timeout, at most one replacement in flight per
    MachineDeployment (the ``name`` label) across all workers (MCM's ``tryMarkingMachineFailed``).

    The count of replacements in flight is read from the API server while the permit is held, so a
    second worker cannot miss a Failed mark that the mirror has not seen yet. A machine without a
    ``name`` label belongs to no deployment and is marked at once.
    """
    settings = get_settings()
    deployment = machine.metadata.labels.get(MACHINE_DEPLOYMENT_NAME_LABEL_KEY, "")
    if not deployment:
        write_status(machine, failed)
        return Requeue.short()
    namespace = machine.metadata.namespace or settings.namespace
    permit_key = f"{namespace}/{deployment}"
    giver = get_permit_giver()
    giver.register_permits(permit_key, MAX_REPLACEMENTS)
    token = giver.try_permit(permit_key, PERMIT_TIMEOUT)
    if token is None:
        log.info("machine %s: permit of deployment %s busy; will try again", machine.key, deployment)
        return Requeue.short()
    try:
        peers = context.machines_with_label(MACHINE_DEPLOYMENT_NAME_LABEL_KEY, deployment, namespace)
        name = machine.metadata.name or ""
        if can_mark_failed(peers, name):
            write_status(machine, failed)
            return Requeue.short()
        # the operation's type stays: a failed in-place update waiting here is still one (the
        # health check must leave it to its replacement, not revive it)
        type_ = machine.status.last_operation.type or MachineOperationType.HEALTH_CHECK
        waiting = updated_status(
            machine,
            last_op=last_operation(not_marked_description(name), MachineState.PROCESSING, type_),
        )
        write_status(machine, waiting)
        return Requeue(settings.health_recheck_period)
    finally:
        giver.release_permit(permit_key, token)


def sync_node(machine: Machine, cc: ClassContext | None, node: Obj | None) -> Requeue | None:
    """Machine-name label, node template (three-way), node finalizer, virtual capacity: one patch
    of the machine's ``node`` metadata and, with virtual capacity, one of its status."""
    target = context.target_api()
    node_name = machine.metadata.labels.get(NODE_LABEL_KEY, "")
    if target is None or node is None:
        return None
    patch = node_sync_patch(node, machine, add_finalizer=not machine.metadata.is_deleting)
    if patch is not None:
        metadata = patch["metadata"]
        if "finalizers" not in metadata and "spec" not in patch:
            metadata.pop("resourceVersion", None)  # maps merge key by key: nothing to clobber
        ops.patch(target, kinds.NODE.resource, node_name, patch)
    virtual = virtual_capacity_patches(node, cc.machine_class if cc is not None else None)
    if virtual is not None:
        status_patch, meta_patch = virtual
        if status_patch:
            ops.patch(target, kinds.NODE.resource, node_name, status_patch, subresource="status")
        ops.patch(target, kinds.NODE.resource, node_name, meta_patch)
    return None
