"""The deletion flow's steps, one function per upstream step of ``triggerDeletionFlow``
(``setMachineTerminationStatus``, ``getVMStatus``, ``drainNode``, ``deleteNodeVolAttachments``,
``deleteVM``, ``deleteNodeObject``, ``deleteMachineFinalizers``), and ``step``, which picks the one
the Machine's ``status.lastOperation.description`` asks for.

These are the flow's edges: each step reads what it needs through the pass's ``MachineScope``, calls
the Driver or the API servers, and says what the pass does next (``StepResult``): move on
(``Continue``, its status left for the pass to write), stop at a status (``Stop``), requeue, or end
(None: the finalizer is gone). Which description, state and retry an outcome makes is decided in
``deletion_steps`` (pure); how steps chain within a pass and where the status is written is
``deletion.terminate``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.api import (
    Machine,
    MachineOperationType,
    MachinePhase,
    MachineState,
    MachineStatus,
    format_time,
)
from mcm_tasks.api.constants import (
    DELETED_BY_FLOW_ANNOTATION,
    MCM_FINALIZER,
    NODE_DELETION_TIMEOUT_ANNOTATION,
    NODE_LABEL_KEY,
    NODE_TERMINATING_REASON_UNHEALTHY,
    NODE_VOLUME_DETACH_TIMEOUT_ANNOTATION,
    PRE_DRAIN_HOOKS_RELEASED_ANNOTATION,
)
from mcm_tasks.controllers.common import context_io, status, status_io
from mcm_tasks.controllers.common.finalizers import with_finalizer
from mcm_tasks.controllers.common.lagging_io import wake
from mcm_tasks.controllers.machine import deleting, metrics
from mcm_tasks.controllers.machine.deletion_steps import (
    NO_TARGET_SKIP,
    Retry,
    Step,
    Transition,
    delete_vm_transition,
    drain_transition,
    go_q,
    moving_on,
    no_node_found,
    step_of,
    step_of_description,
    vm_status_transition,
)
from mcm_tasks.controllers.machine.descriptions import (
    GET_VM_STATUS,
    INITIATE_DRAIN,
    INITIATE_FINALIZER_REMOVAL,
    INITIATE_NODE_DELETION,
    INITIATE_VM_DELETION,
)
from mcm_tasks.controllers.machine.drain import cluster_io as io
from mcm_tasks.controllers.machine.drain import step_io as drain_mod
from mcm_tasks.controllers.machine.drain.outcome import DrainResult
from mcm_tasks.controllers.machine.drain.state_io import DrainStore
from mcm_tasks.controllers.machine.drain.volumes import live_attachments_on
from mcm_tasks.controllers.machine.scope import MachineScope
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe, is_conflict
from mcm_tasks.kube.events import NORMAL, WARNING
from mcm_tasks.queue import Requeue
from mcm_tasks.tracing import child_span, traced_driver
from providers import UnknownProviderError, get_driver
from providers.driver import DeleteMachineRequest, Driver, GetMachineStatusRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Continue:
    """A step moved the flow on: the next one may run now, on the Machine as the step left it, its
    status ``unwritten`` (the pass writes it where it stops) or as the API server returned it."""

    machine: Machine
    unwritten: bool = True


@dataclass(frozen=True)
class Stop:
    """A step stopped the pass at a status to write (a failure, or one that stays at its step)."""

    status: MachineStatus
    requeue: Requeue
    moves: bool
    #: what holds the step, for the ``Deleting`` condition's message (``deleting.deleting_message``)
    detail: str = ""


StepResult = Requeue | Continue | Stop | None


def requeue(retry: Retry) -> Requeue:
    if retry is Retry.NEXT_STEP:
        return Requeue.conflict()
    return {Retry.SHORT: Requeue.short, Retry.MEDIUM: Requeue.medium, Retry.LONG: Requeue.long}[retry]()


def step(scope: MachineScope) -> StepResult:
    """One step of the deletion flow: the one of ``DELETION_STEPS`` the machine's description asks
    for."""
    machine = scope.machine
    if not machine.metadata.has_finalizer(MCM_FINALIZER):
        log.warning("machine %s is missing finalizers, deletion cannot proceed", machine.key)
        return Requeue.long()
    current = step_of(machine)
    log.debug("machine %s: deletion step %s", machine.key, current)
    return DELETION_STEPS[current](scope)


def _deployment_timeout(scope: MachineScope, key: str) -> float | None:
    """A per-deployment timeout (``key`` on the machine's MachineDeployment or MachineSet), read once
    per pass; None when unset or 0. An invalid value is a Warning Event and counts as unset."""

    def read() -> float | None:
        raw = context_io.machine_setting(scope.api, scope.machine, key, scope.settings.namespace)
        try:
            return deleting.parse_timeout(raw)
        except ValueError as err:
            status_io.record_event(
                scope.api, scope.machine, WARNING, "InvalidTimeout", f"{key}: {err}; ignored"
            )
            return None

    return scope.remember(f"timeout:{key}", read)


def _drain_store(scope: MachineScope) -> DrainStore:
    """The pass's one drain store: it knows what it cleared (``DrainStore``), so the drain of a
    flow that started in this pass reads no progress, and its end clears none."""
    return scope.remember("drain-store", DrainStore)


def _step_result(
    scope: MachineScope, machine: Machine, transition: Transition, *, last_known_state: str | None = None
) -> StepResult:
    """A step's transition: one that moves on to the next step leaves its status for the pass to
    write where it stops (``terminate``); any other stops the pass with its status."""
    moves = step_of_description(transition.description) != step_of(machine)
    op = status.last_operation(
        transition.description, transition.state, MachineOperationType.DELETE, now=scope.clock()
    )
    new = status.updated_status(machine, last_op=op, last_known_state=last_known_state)
    if moves and transition.retry is Retry.NEXT_STEP:
        return Continue(machine.model_copy(update={"status": new}))
    return Stop(new, requeue(transition.retry), moves)


def _driver(scope: MachineScope) -> tuple[context_io.ClassContext, Driver] | None:
    """The class context and Driver, or None (with a Warning Event) when they cannot be had."""
    machine, machine_class = scope.machine, scope.machine_class()
    if machine_class is None:
        status_io.record_event(
            scope.api, machine, WARNING, "DeleteBlocked", f"MachineClass {machine.spec.class_.name} not found"
        )
        return None
    if scope.class_context is None or scope.class_context.machine_class is not machine_class:
        scope.class_context = context_io.load_class_context(scope.api, machine_class, scope.settings)
    found = scope.class_context
    try:
        return found, traced_driver(get_driver(machine_class.provider))
    except UnknownProviderError as err:
        status_io.record_event(scope.api, machine, WARNING, "DeleteBlocked", str(err))
        return None


def _set_terminating(scope: MachineScope) -> StepResult:
    """Upstream: ``setMachineTerminationStatus``."""
    machine = scope.machine
    _drain_store(scope).clear(machine.key)
    api = scope.target
    if machine.status.current_status.phase == MachinePhase.FAILED and api is not None:
        node = scope.node()
        if node is not None:
            try:  # remember that a failed machine goes, before its phase no longer says so
                now = scope.precise_clock()
                scope.node_written(io.set_terminating(api, node, NODE_TERMINATING_REASON_UNHEALTHY, now))
            except ApiException as err:
                log.warning("machine %s: Terminating condition not set: %s", machine.key, describe(err))
    now = scope.clock()
    op = status.last_operation(GET_VM_STATUS, MachineState.PROCESSING, MachineOperationType.DELETE, now=now)
    new = status.updated_status(
        machine, last_op=op, current=status.current_status(MachinePhase.TERMINATING, now=now)
    )
    new = deleting.with_deleting_condition(new, now)
    # its own write, even when alike (a restart): the phase says Terminating while the node drains
    written = status_io.update_machine_status(scope, machine, new, dedup=False)
    return Requeue.conflict() if written is None else Continue(written, unwritten=False)


def _get_vm_status(scope: MachineScope) -> StepResult:
    """Upstream: ``getVMStatus``."""
    machine = scope.machine
    api = scope.target
    if machine.metadata.labels.get(NODE_LABEL_KEY):
        return _step_result(scope, machine, moving_on(INITIATE_DRAIN if api is not None else NO_TARGET_SKIP))
    node_name = io.node_for_machine(api, machine.metadata.name or "") if api is not None else ""
    error: Exception | None = None
    if not node_name:
        found = _driver(scope)
        if found is None:
            return Requeue.long()
        ctx, driver = found
        request = GetMachineStatusRequest(machine=machine, machine_class=ctx.machine_class, secret=ctx.secret)
        try:
            node_name = driver.get_machine_status(request).node_name
        except Exception as err:  # every failure is a code (code_of), as upstream decodes them
            error = err
    transition = vm_status_transition(error, target_mode=api is not None)
    if node_name and api is not None and transition.retry is Retry.NEXT_STEP:
        patch = {"metadata": {"labels": {NODE_LABEL_KEY: node_name}}}
        labelled = ops.patch(
            scope.api,
            kinds.MACHINE.resource,
            machine.metadata.name or "",
            patch,
            machine.metadata.namespace,
        )
        # later writes carry the label's resourceVersion; the status stays the pass's own
        machine = Machine.model_validate(labelled).model_copy(update={"status": machine.status})
    return _step_result(scope, machine, transition)


def _held_by_hooks(scope: MachineScope, names: list[str], description: str, reason: str) -> Stop:
    """A hook holds the flow at its step: lastOperation says which (Processing, the step kept), the
    ``Deleting`` condition gets the hook's reason, and an Event names the hooks when the wait begins or
    its hooks change. No requeue is needed (removing a hook wakes the machine); LongRetry is the net."""
    machine = scope.machine
    changed = machine.status.last_operation.description != description
    if changed:
        status_io.record_event(scope.api, machine, NORMAL, reason, description.rsplit(". ", 1)[0])
    op = status.last_operation(
        description, MachineState.PROCESSING, MachineOperationType.DELETE, now=scope.clock()
    )
    return Stop(status.updated_status(machine, last_op=op), Requeue.long(), moves=changed)


def _mark_released(scope: MachineScope, machine: Machine) -> Machine:
    """The last pre-drain hook went: the drain begins now, and its timeout runs from now (the
    annotation outlives the pass and any failure the drain then writes). Later writes of the pass
    carry the patch's resourceVersion; the status stays the pass's own."""
    stamp = {PRE_DRAIN_HOOKS_RELEASED_ANNOTATION: format_time(scope.clock())}
    patched = ops.patch(
        scope.api,
        kinds.MACHINE.resource,
        machine.metadata.name or "",
        {"metadata": {"annotations": stamp}},
        machine.metadata.namespace,
    )
    status_io.record_event(
        scope.api, machine, NORMAL, "PreDrainHooksReleased", "No pre-drain hook is left: draining the node"
    )
    return Machine.model_validate(patched).model_copy(update={"status": machine.status})


def _drain(scope: MachineScope) -> StepResult:
    """Upstream: ``drainNode``; a pre-drain hook holds it before the cordon."""
    names = deleting.pre_drain_hooks(scope.machine)
    if names:
        return _held_by_hooks(
            scope, names, deleting.pre_drain_wait(names), deleting.WAITING_FOR_PRE_DRAIN_HOOK_REASON
        )
    if deleting.released_from_pre_drain_hooks(scope.machine):
        scope.machine = _mark_released(scope, scope.machine)
    machine_class = scope.machine_class()  # without its secrets: the volume IDs and metrics need it
    driver = None
    if machine_class is not None:
        try:
            driver = traced_driver(get_driver(machine_class.provider))
        except UnknownProviderError:
            driver = None  # volumes then go untracked; the detach barrier still holds the drain
    settings = scope.settings
    detach_timeout = _deployment_timeout(scope, NODE_VOLUME_DETACH_TIMEOUT_ANNOTATION)
    if detach_timeout is not None:  # the deployment's bound of the volume-detach waits
        settings = settings.model_copy(update={"machine_pv_detach_timeout": detach_timeout})
    with child_span("Drain", node=scope.machine.metadata.labels.get(NODE_LABEL_KEY)):
        result = drain_mod.drain_step(scope, machine_class, driver, _drain_store(scope), settings)
    transition = drain_transition(result)
    if transition is None:
        return _drain_waits(scope.machine, result)
    return _step_result(scope, scope.machine, transition)


def _drain_waits(machine: Machine, result: DrainResult) -> StepResult:
    """The drain waits; when what holds it changed (a pod refused, by which budget), the ``Deleting``
    condition says so: one status write per change, none per retry."""
    wait = Requeue(after=result.wake_in)
    current = deleting.deleting_condition(machine.status)
    if current is None or current.reason != deleting.DRAINING_REASON:
        return wait  # the drain began in this pass: its first write is the pass's own
    wanted = deleting.deleting_message(machine.status.last_operation.description, result.holding)
    if current.message == wanted:
        return wait
    return Stop(machine.status, wait, moves=False, detail=result.holding)


def _delete_volume_attachments(scope: MachineScope) -> StepResult:
    """Upstream: ``getLiveVAForNode``, ``deleteVAForNode``."""
    machine, node_name = scope.machine, scope.node_name()
    api = scope.target
    node = scope.node() if api is not None else None
    if node is None or api is None:
        text = (
            f"Skipping deleteNodeVolAttachments due to - node {go_q(node_name)} not found. "
            "Moving to VM Deletion."
        )
        return _step_result(scope, machine, moving_on(f"{text} {INITIATE_VM_DELETION}"))
    if not (node.get("status") or {}).get("volumesAttached"):
        text = f"Node Volumes for node: {node_name} are already detached. Moving to VM Deletion."
        return _step_result(scope, machine, moving_on(f"{text} {INITIATE_VM_DELETION}"))
    live = live_attachments_on(node_name, io.volume_attachments(api, node_name, ()))
    if not live:
        text = f"No Live VolumeAttachments for node: {node_name}. Moving to VM Deletion."
        return _step_result(scope, machine, moving_on(f"{text} {INITIATE_VM_DELETION}"))
    timeout = _deployment_timeout(scope, NODE_VOLUME_DETACH_TIMEOUT_ANNOTATION)
    if deleting.timed_out(machine, deleting.DETACHING_VOLUMES_REASON, timeout, scope.clock()):
        names = ", ".join(sorted(str(va["metadata"]["name"]) for va in live))
        text = f"VolumeAttachments of node {node_name} still live after {timeout:g}s: {names}"
        status_io.record_event(
            scope.api,
            machine,
            WARNING,
            "VolumeDetachTimeout",
            f"{text} ({NODE_VOLUME_DETACH_TIMEOUT_ANNOTATION})",
        )
        return _step_result(
            scope, machine, moving_on(f"{text}. Moving to VM Deletion. {INITIATE_VM_DELETION}")
        )
    try:
        for va in live:
            ops.delete(api, kinds.VOLUME_ATTACHMENT.resource, str(va["metadata"]["name"]), missing_ok=True)
    except ApiException as err:  # upstream logs it and retries after ShortRetry, the flow at this step
        if is_conflict(err):
            raise
        log.warning(
            "machine %s: VolumeAttachments of node %s not deleted: %s", machine.key, node_name, describe(err)
        )
        return Requeue.short()
    log.info("machine %s: deleted %d VolumeAttachments of node %s", machine.key, len(live), node_name)
    return Requeue.short()


def _delete_vm(scope: MachineScope) -> StepResult:
    """Upstream: ``deleteVM``; a pre-terminate hook holds it before the Driver is called."""
    machine = scope.machine
    names = deleting.pre_terminate_hooks(machine)
    if names:
        return _held_by_hooks(
            scope, names, deleting.pre_terminate_wait(names), deleting.WAITING_FOR_PRE_TERMINATE_HOOK_REASON
        )
    found = _driver(scope)
    if found is None:
        return Requeue.long()
    ctx, driver = found
    request = DeleteMachineRequest(machine=machine, machine_class=ctx.machine_class, secret=ctx.secret)
    error: Exception | None = None
    last_known_state = None
    try:
        last_known_state = driver.delete_machine(request).last_known_state or None
    except Exception as err:  # every failure is a code (code_of), as upstream decodes them
        error = err
    return _step_result(scope, machine, delete_vm_transition(error), last_known_state=last_known_state)


def _delete_node(scope: MachineScope) -> StepResult:
    """Upstream: ``deleteNodeObject``."""
    machine, node_name = scope.machine, scope.node_name()
    api = scope.target
    if not node_name:
        text = (
            f"Label {go_q(NODE_LABEL_KEY)} not present on machine {go_q(machine.metadata.name or '')}, "
            f"continuing deletion flow. {INITIATE_FINALIZER_REMOVAL}"
        )
        return _step_result(scope, machine, moving_on(text))
    if api is None:  # no target cluster: its node lister finds nothing, as upstream's does
        return _step_result(scope, machine, moving_on(no_node_found(node_name)))
    try:
        # the mark tells the Node's DELETE apart from someone else's (the status may be a step behind)
        mark = {DELETED_BY_FLOW_ANNOTATION: Step.DELETE_NODE.value}
        if io.has_node_finalizer(scope.node()):
            io.remove_node_finalizer(api, node_name, mark)
        answer = ops.delete(api, kinds.NODE.resource, node_name, missing_ok=True)
        if io.has_node_finalizer(answer):  # the mirror had not seen the finalizer: the Node waits on it
            io.remove_node_finalizer(api, node_name, mark)
        gone = answer is None
    except ApiException as err:
        if is_conflict(err):
            raise
        failed = f"Deletion of Node Object {go_q(node_name)} failed due to error: {describe(err)}"
        timeout = _deployment_timeout(scope, NODE_DELETION_TIMEOUT_ANNOTATION)
        if deleting.timed_out(machine, deleting.DELETING_NODE_REASON, timeout, scope.clock()):
            given_up = f"{failed}; gave up after the node deletion timeout of {timeout:g}s"
            note = f"{given_up} ({NODE_DELETION_TIMEOUT_ANNOTATION}); the Node is left behind"
            status_io.record_event(scope.api, machine, WARNING, "NodeDeletionTimeout", note)
            return _step_result(scope, machine, moving_on(f"{given_up}. {INITIATE_FINALIZER_REMOVAL}"))
        return _step_result(
            scope,
            machine,
            Transition(f"{failed}. {INITIATE_NODE_DELETION}", MachineState.FAILED, Retry.SHORT),
        )
    if gone:
        text = no_node_found(node_name)
    else:
        text = f"Deletion of Node Object {go_q(node_name)} is successful. {INITIATE_FINALIZER_REMOVAL}"
    return _step_result(scope, machine, moving_on(text))


def _remove_finalizer(scope: MachineScope) -> Requeue | None:
    """Upstream: ``deleteMachineFinalizers``."""
    machine = scope.machine
    rest = with_finalizer(machine.metadata.finalizers, MCM_FINALIZER, False)
    meta = {
        "finalizers": rest,
        "resourceVersion": machine.metadata.resource_version,
        # the Machine's DELETE then says the flow released it: its last status may be a step behind
        "annotations": {DELETED_BY_FLOW_ANNOTATION: Step.REMOVE_FINALIZER.value},
    }
    body = {"metadata": meta}
    ops.patch(
        scope.api,
        kinds.MACHINE.resource,
        machine.metadata.name or "",
        body,
        machine.metadata.namespace,
    )
    _drain_store(scope).clear(machine.key)
    deleted = machine.metadata.deletion_timestamp
    if deleted is not None:
        seconds = (scope.clock() - deleted).total_seconds()
        metrics.observe_duration("delete", machine, seconds, scope.machine_class())
    log.info("machine %s: finalizer removed, deletion complete", machine.key)
    wake(scope.settings, status.owner_set_items(machine))  # while the mirror lags: its set counts it gone
    return None


#: upstream ``triggerDeletionFlow``'s steps in its order, each the phase of a pass the machine's
#: ``status.lastOperation.description`` asks for (``deletion_steps.step_of``); ``deletion.terminate``
#: folds them, step after step while each moves the flow on
DELETION_STEPS: Final[dict[Step, Callable[[MachineScope], StepResult]]] = {
    Step.SET_TERMINATING: _set_terminating,
    Step.GET_VM_STATUS: _get_vm_status,
    Step.DRAIN: _drain,
    Step.DELETE_VOLUME_ATTACHMENTS: _delete_volume_attachments,
    Step.DELETE_VM: _delete_vm,
    Step.DELETE_NODE: _delete_node,
    Step.REMOVE_FINALIZER: _remove_finalizer,
}
