"""The machine controller's part of an in-place update (``controllers.common.inplace`` decides):
turn the Node's update labels into its ``InPlaceUpdate`` condition (upstream
``updateNodeConditionBasedOnLabel``), drain a Node selected for update and hand it to the node
agent, then follow the agent's result into the machine's phase, with
``--machine-inplace-update-timeout`` (or the machine's ``inPlaceUpdateTimeout``) as the limit. A
machine whose update failed is marked Failed after its health timeout through the deployment's
replacement permit (``health_io.mark_failed``), never with ``disableHealthTimeout``.

While an update owns the machine's phase the health check does not run, but the machine's copy of
its Node's conditions is still kept current (``copy_node_conditions``), as upstream's
``reconcileMachineHealth`` does in every phase: the deployment is woken when the copy's
``InPlaceUpdate`` turns ``UpdateSuccessful``."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.api import (
    Machine,
    MachineOperationType,
    MachinePhase,
    MachineState,
    MachineStatus,
)
from mcm_tasks.api.constants import NODE_LABEL_KEY
from mcm_tasks.controllers.common import inplace as ip
from mcm_tasks.controllers.common import nodecondition_io, status, status_io
from mcm_tasks.controllers.machine import health_io
from mcm_tasks.controllers.machine.drain import cluster_io as io
from mcm_tasks.controllers.machine.health import conditions_changed, health_timeout, node_conditions
from mcm_tasks.controllers.machine.preserve_io import evict_pods
from mcm_tasks.controllers.machine.scope import MachineScope
from mcm_tasks.durations import format_duration
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import is_conflict
from mcm_tasks.queue import Requeue

log = logging.getLogger(__name__)


def update_timeout(scope: MachineScope, machine: Machine) -> float:
    own = machine.spec.inplace_update_timeout_seconds
    return own if own is not None else scope.settings.machine_inplace_update_timeout


def in_place_owns(machine: Machine) -> bool:
    """Whether the health check must leave the machine's phase to this step: during the update, and
    once a failed update made it Failed (its Node may well be Ready: the machine is replaced all the
    same, not revived)."""
    current = machine.status
    if current.current_status.phase == MachinePhase.FAILED:
        return current.last_operation.type == MachineOperationType.IN_PLACE_UPDATE
    return current.current_status.phase in ip.IN_PLACE_PHASES


def update_node_condition_based_on_label(
    scope: MachineScope, machine: Machine, node: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, Requeue | None]:
    """Upstream ``updateNodeConditionBasedOnLabel`` (``ip.update_node_condition_based_on_label``
    decides): write the Node's ``InPlaceUpdate`` condition its labels call for; the node as it is
    now, for the rest of the pass, and a recheck while the Node waits for its drain.

    The write is a compare-and-swap on the Node as read (as upstream's ``UpdateStatus`` of its
    lister's copy): a condition decided from a stale read (the mirror lags) would undo a later step,
    e.g. put ``SelectedForUpdate`` back over ``ReadyForUpdate``, and the node agent would wait for
    ever. On a Conflict the Node is read live and decided once more."""
    api = scope.target
    if api is None or node is None or machine.metadata.is_deleting:
        return node, None
    for attempt in range(2):
        decided = ip.update_node_condition_based_on_label(node)
        if decided.reason is None:
            return node, Requeue.medium() if decided.awaiting_drain else None
        stamp = scope.clock()
        condition = nodecondition_io.condition(
            ip.IN_PLACE_CONDITION, "True", decided.reason, decided.message, stamp
        )
        name = str(node["metadata"]["name"])
        try:
            nodecondition_io.write(
                api, name, condition, resource_version=node["metadata"].get("resourceVersion")
            )
        except ApiException as err:
            if not is_conflict(err):
                raise
            live = ops.get(api, kinds.NODE.resource, name, missing_ok=True) if attempt == 0 else None
            if live is None:
                log.info(
                    "machine %s: node %s keeps changing; its in-place condition next pass", machine.key, name
                )
                return node, Requeue(scope.settings.conflict_retry)
            node = live
            continue
        log.info("machine %s: node %s in-place condition %s", machine.key, name, decided.reason)
        return ip.with_condition(node, condition), None
    return node, None


def copy_node_conditions(scope: MachineScope, machine: Machine, node: dict[str, Any] | None) -> Machine:
    """The machine's copy of its Node's conditions, kept current while an in-place update owns
    the phase (the health check, which copies them otherwise, does not run then)."""
    if node is None:
        return machine
    observed = node_conditions(node)
    if not conditions_changed(machine.status.conditions, observed):
        return machine
    return (
        status_io.update_machine_status(scope, machine, status.updated_status(machine, conditions=observed))
        or machine
    )


def reconcile_in_place(
    scope: MachineScope, machine: Machine, node: dict[str, Any] | None
) -> tuple[Machine, Requeue | None]:
    """The in-place step of a machine reconcile, on the machine's ``node`` as the pass read it: the
    machine as it is now, and when to come back."""
    api = scope.target
    node_name = machine.metadata.labels.get(NODE_LABEL_KEY, "")
    if api is None or not node_name:
        return machine, None
    now = scope.clock()
    decision = ip.decide(
        machine, node, now, update_timeout(scope, machine), health_timeout(machine, scope.settings)
    )
    step = decision.step
    if step is ip.Step.NONE:
        return machine, None
    if step is ip.Step.WAIT:
        return machine, Requeue(max(decision.after or 0.0, 0.0) + 0.5)
    if step is ip.Step.PREPARE:
        assert node is not None
        return _prepare(scope, machine, api, node, now)
    if step is ip.Step.SUCCEEDED:
        succeeded = _phase(scope, machine, MachinePhase.IN_PLACE_UPDATE_SUCCESSFUL,
                           ip.UPDATE_SUCCESSFUL_DESCRIPTION, MachineState.SUCCESSFUL, now)  # fmt: skip
        return succeeded, Requeue.short()
    if step in (ip.Step.FAILED, ip.Step.TIMED_OUT):
        text = ip.UPDATE_TIMED_OUT_DESCRIPTION if step is ip.Step.TIMED_OUT else "In-place update failed"
        if decision.reason:
            text = f"{text}: {decision.reason}"
        written = _phase(scope, machine, MachinePhase.IN_PLACE_UPDATE_FAILED, text, MachineState.FAILED, now)
        return written, Requeue(health_timeout(machine, scope.settings) + 0.5)
    if step is ip.Step.RUNNING:
        text = f"Machine {machine.metadata.name} is Running again after its in-place update"
        written = _phase(scope, machine, MachinePhase.RUNNING, text, MachineState.SUCCESSFUL, now,
                         type_=MachineOperationType.HEALTH_CHECK)  # fmt: skip
        return written, None
    # GIVE_UP: Failed through the replacement permit, as every health failure; the set replaces it
    return machine, health_io.mark_failed(scope, machine, given_up_status(scope, machine, now))


def given_up_status(scope: MachineScope, machine: Machine, now: datetime) -> MachineStatus:
    """Upstream's health-timeout failure of an ``InPlaceUpdateFailed`` machine
    (``tryMarkingMachineFailed`` → ``updateMachineToFailedState``): Failed, the last operation's
    type kept (``InPlaceUpdate``, so the health check leaves the machine to its replacement)."""
    timeout = health_timeout(machine, scope.settings)
    summary = ", ".join(f"{c.type}={c.status}" for c in machine.status.conditions) or "none"
    description = (
        f"Machine {machine.metadata.name} health checks failing since last {format_duration(timeout)} "
        f"minutes. Updating machine phase to Failed. Node conditions: {summary}"
    )
    return status.updated_status(
        machine,
        last_op=status.last_operation(
            description,
            MachineState.FAILED,
            machine.status.last_operation.type or MachineOperationType.IN_PLACE_UPDATE,
            now=now,
        ),
        current=status.current_status(MachinePhase.FAILED, now=now).model_copy(
            update={"preserve_expiry_time": machine.status.current_status.preserve_expiry_time}
        ),
    )


def _phase(
    scope: MachineScope,
    machine: Machine,
    phase: MachinePhase,
    description: str,
    state: MachineState,
    now: datetime,
    *,
    type_: MachineOperationType = MachineOperationType.IN_PLACE_UPDATE,
) -> Machine:
    new = status.updated_status(
        machine,
        last_op=status.last_operation(description, state, type_, now=now),
        current=status.current_status(phase, now=now).model_copy(
            update={"preserve_expiry_time": machine.status.current_status.preserve_expiry_time}
        ),
    )
    written = status_io.update_machine_status(scope, machine, new, dedup=False) or machine
    log.info("machine %s: %s (%s)", machine.key, phase, description)
    return written


def _prepare(
    scope: MachineScope, machine: Machine, api: ApiClient, node: dict[str, Any], now: datetime
) -> tuple[Machine, Requeue]:
    """Cordon and drain the selected Node; once it is empty, tell the node agent and go
    InPlaceUpdating (upstream ``drainNodeForInPlace``, ``updateMachineStatusAndNodeCondition``)."""
    io.cordon(api, node)
    name = str(node["metadata"]["name"])
    if evict_pods(api, name):
        if machine.status.last_operation.description != ip.DRAINING_DESCRIPTION:
            op = status.last_operation(
                ip.DRAINING_DESCRIPTION,
                MachineState.PROCESSING,
                MachineOperationType.IN_PLACE_UPDATE,
                now=now,
            )
            machine = (
                status_io.update_machine_status(scope, machine, status.updated_status(machine, last_op=op))
                or machine
            )
        return machine, Requeue.short()
    ready = nodecondition_io.condition(
        ip.IN_PLACE_CONDITION, "True", ip.READY_FOR_UPDATE, ip.NODE_READY_FOR_UPDATE, now
    )
    nodecondition_io.write(api, name, ready)
    written = _phase(
        scope, machine, MachinePhase.IN_PLACE_UPDATING, ip.NODE_READY_FOR_UPDATE, MachineState.PROCESSING, now
    )
    return written, Requeue(update_timeout(scope, machine) + 0.5)
