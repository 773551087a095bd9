"""The health check's edges (upstream ``reconcileMachineHealth``, ``syncMachineNodeTemplates``): read the
node, write what ``health`` decided, mark machines Failed through the permit giver, and keep the node in
sync with the machine.

After a health status write the reconcile goes on to the node sync in the same task (upstream stops
and comes back after ShortRetry): the two write different objects, so nothing is gained by waiting.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineOperationType, MachinePhase, MachineState, MachineStatus, Obj
from mcm_tasks.api.constants import (
    MACHINE_DEPLOYMENT_NAME_LABEL_KEY,
    MACHINE_JOIN_DURATION_ANNOTATION,
    NODE_LABEL_KEY,
    USER_DATA_SECRET_KEY,
)
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.context_io import ClassContext
from mcm_tasks.controllers.common.remediation import MAX_REPLACEMENTS_REACHED
from mcm_tasks.controllers.common.status import last_operation, updated_status
from mcm_tasks.controllers.common.status_io import update_machine_status
from mcm_tasks.controllers.machine import bootstrap_io, creation_timeout_io, metrics, remediation_io, storm
from mcm_tasks.controllers.machine.health import HealthDecision, decide_health, not_marked_description
from mcm_tasks.controllers.machine.nodesync import node_sync_patch, virtual_capacity_patches
from mcm_tasks.controllers.machine.scope import MachineScope
from mcm_tasks.durations import format_duration
from mcm_tasks.kube import ops
from mcm_tasks.permits import get_permit_giver
from mcm_tasks.queue import Requeue
from mcm_tasks.tracing import record_span

log = logging.getLogger(__name__)

#: how long a health check waits for the deployment's permit (MCM's lockAcquireTimeout)
PERMIT_TIMEOUT: Final = 1.0
#: one permit per deployment, as MCM: it serializes the count and the mark; the replacement budget
#: is in the count (``--max-replacements``), not in the number of permits
PERMITS: Final = 1


def reconcile_health(
    scope: MachineScope, machine: Machine, cc: ClassContext | None, node: Obj | None
) -> tuple[Machine, Requeue | None]:
    """Run the health check on the machine's ``node`` (as the pass read it); the machine as it is
    now and when to come back (None: no timer needed)."""
    settings = scope.settings
    decision = decide_health(machine, node, scope.clock(), settings)
    if storm.is_held(machine):
        return _held_by_storm(
            scope, machine, decision, settings.health_recheck_period, node_back=node is not None
        )
    if decision.status is None:
        recheck = None if decision.recheck_after is None else Requeue(decision.recheck_after)
        return machine, recheck
    if decision.failed_by_health_timeout:
        return machine, mark_failed(scope, machine, decision.status)
    written = update_machine_status(scope, machine, decision.status) or machine
    if decision.joined:
        _after_join(scope, written, cc)
    elif (
        machine.status.current_status.phase == MachinePhase.PENDING
        and written.status.current_status.phase == MachinePhase.FAILED
    ):
        creation_timeout_io.on_join_timeout(scope, written)
    phase = written.status.current_status.phase
    if phase != machine.status.current_status.phase:
        refresh_remediation(scope, written)
    if phase in (MachinePhase.PENDING, MachinePhase.UNKNOWN):
        return written, Requeue(settings.health_recheck_period)
    return written, None


def _held_by_storm(
    scope: MachineScope, machine: Machine, decision: HealthDecision, recheck: float, *, node_back: bool
) -> tuple[Machine, Requeue]:
    """A machine a node-deletion storm holds: its Node is gone, so the health check's transition to
    Unknown is written with the hold's explanation as its description, and it is never marked Failed
    (the hold ends when its Node is back or an operator releases it). Every pass says so."""
    written = machine
    if decision.status is not None and not decision.failed_by_health_timeout:
        why = "" if node_back else storm.hold_description(machine)
        status = decision.status
        if why:
            status = status.model_copy(
                update={"last_operation": status.last_operation.model_copy(update={"description": why})}
            )
        written = update_machine_status(scope, machine, status) or machine
    return written, Requeue(recheck, f"held: {storm.NODE_DELETION_STORM}")


def _after_join(scope: MachineScope, machine: Machine, cc: ClassContext | None) -> None:
    """First join: the bootstrap token has served its purpose; note how long joining took."""
    target = scope.target
    user_data = cc.secret.data.get(USER_DATA_SECRET_KEY, b"") if cc is not None else b""
    if target is not None and bootstrap_io.needs_token(user_data):
        try:
            bootstrap_io.delete_token(target, machine.metadata.name or "")
        except Exception as err:  # best effort, as upstream: the token expires anyway
            log.warning("machine %s: could not delete its bootstrap token: %s", machine.key, err)
    created = machine.metadata.creation_timestamp
    if created is None or MACHINE_JOIN_DURATION_ANNOTATION in machine.metadata.annotations:
        return
    seconds = max((scope.clock() - created).total_seconds(), 0.0)
    metrics.observe_duration("join", machine, seconds, cc.machine_class if cc is not None else None)
    now_ns = time.time_ns()
    record_span("Join", machine.metadata.uid or "", now_ns - int(seconds * 1e9), now_ns,
                machine_key=machine.key, node=machine.metadata.labels.get(NODE_LABEL_KEY))  # fmt: skip
    creation_timeout_io.on_join(scope, machine, seconds)
    patch = {"metadata": {"annotations": {MACHINE_JOIN_DURATION_ANNOTATION: format_duration(round(seconds))}}}
    ops.patch(
        scope.api,
        kinds.MACHINE.resource,
        machine.metadata.name or "",
        patch,
        machine.metadata.namespace,
    )


def _permit(scope: MachineScope, machine: Machine) -> tuple[str, str, str] | None:
    """(namespace, deployment, permit key) of a machine's deployment; None without a ``name`` label."""
    deployment = machine.metadata.labels.get(MACHINE_DEPLOYMENT_NAME_LABEL_KEY, "")
    if not deployment:
        return None
    namespace = machine.metadata.namespace or scope.settings.namespace
    return namespace, deployment, f"{namespace}/{deployment}"


def mark_failed(scope: MachineScope, machine: Machine, failed: MachineStatus) -> Requeue:
    """Mark a machine Failed after its health timeout, within its MachineDeployment's remediation
    budgets (``common.remediation``: zone outage, unhealthy short-circuit, replacement budget) across
    all workers (MCM's ``tryMarkingMachineFailed``, whose budget is a fixed 1).

    The deployment's one permit serializes the count and the mark, so two workers cannot both see
    room for one more; the count is read from the API server while the permit is held, so a Failed
    mark the mirror has not seen yet is counted. A machine without a ``name`` label belongs to no
    deployment and is marked at once. A held machine says why in its lastOperation and in the pass's
    outcome (``held: TooManyUnhealthy 7/10``), and the deployment's condition says it too.
    """
    settings = scope.settings
    where = _permit(scope, machine)
    if where is None and storm.is_held(machine):
        return Requeue(settings.health_recheck_period, f"held: {storm.NODE_DELETION_STORM}")
    if where is None:
        update_machine_status(scope, machine, failed)
        return Requeue.short()
    if storm.is_held(machine):  # its Node was deleted in a storm: kept until released or back
        return Requeue(settings.health_recheck_period, f"held: {storm.NODE_DELETION_STORM}")
    namespace, deployment, permit_key = where
    giver = get_permit_giver()
    giver.register_permits(permit_key, PERMITS)
    token = giver.try_permit(permit_key, PERMIT_TIMEOUT)
    if token is None:
        log.info("machine %s: permit of deployment %s busy; will try again", machine.key, deployment)
        return Requeue.short()
    try:
        peers = context_io.machines_with_label(
            scope.api, MACHINE_DEPLOYMENT_NAME_LABEL_KEY, deployment, namespace
        )
        name = machine.metadata.name or ""
        view = remediation_io.read_view(scope, namespace, deployment, peers, name)
        verdict = view.verdict(name)
        remediation_io.report(scope, view)
        if verdict.allowed:
            update_machine_status(scope, machine, failed)
            return Requeue.short()
        # the operation's type stays: a failed in-place update waiting here is still one (the
        # health check must leave it to its replacement, not revive it)
        type_ = machine.status.last_operation.type or MachineOperationType.HEALTH_CHECK
        description = (
            not_marked_description(name) if verdict.reason == MAX_REPLACEMENTS_REACHED else
            f"Machine {name} couldn't be marked FAILED: {verdict.message}"
        )  # fmt: skip
        waiting = updated_status(
            machine,
            last_op=last_operation(description, MachineState.PROCESSING, type_, now=scope.clock()),
        )
        update_machine_status(scope, machine, waiting)
        return Requeue(settings.health_recheck_period, verdict.held)
    finally:
        giver.release_permit(permit_key, token)


def refresh_remediation(scope: MachineScope, machine: Machine) -> None:
    """After a machine of a blocked deployment changed phase (re-joined, joined, went Unknown): bring
    the deployment's condition up to date under its permit, so an episode ends when the machines
    recover even if none is waiting to be marked Failed. Best effort: a busy permit means another
    pass is at it."""
    where = _permit(scope, machine)
    if where is None or not remediation_io.is_blocked(scope, machine):
        return
    namespace, deployment, permit_key = where
    giver = get_permit_giver()
    giver.register_permits(permit_key, PERMITS)
    token = giver.try_permit(permit_key, PERMIT_TIMEOUT)
    if token is None:
        return
    try:
        peers = context_io.machines_with_label(
            scope.api, MACHINE_DEPLOYMENT_NAME_LABEL_KEY, deployment, namespace
        )
        remediation_io.report(scope, remediation_io.read_view(scope, namespace, deployment, peers))
    finally:
        giver.release_permit(permit_key, token)


def sync_node(
    scope: MachineScope, machine: Machine, cc: ClassContext | None, node: Obj | None
) -> Requeue | None:
    """Machine-name label, node template (three-way), node finalizer, virtual capacity: one patch
    of the machine's ``node`` metadata and, with virtual capacity, one of its status."""
    target = scope.target
    node_name = machine.metadata.labels.get(NODE_LABEL_KEY, "")
    if target is None or node is None:
        return None
    # a Node being deleted gets no finalizer back (a storm hold lets it go)
    node_leaving = bool((node.get("metadata") or {}).get("deletionTimestamp"))
    keep = not (machine.metadata.is_deleting or node_leaving or storm.is_held(machine))
    patch = node_sync_patch(node, machine, add_finalizer=keep)
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
