"""The machine reconcile (upstream ``reconcileClusterMachine``), in MCM's order:

1. add the machine finalizer (and carry on with the object as written);
2. a machine with a deletionTimestamp goes to the ``machine-termination`` queue;
3. frozen (API servers unreachable) → LongRetry;
4. validate the Machine; 5. validate its MachineClass (exists, carries the MCM finalizer, valid node
   template) and merge its secrets;
6. with a node and a phase: the node's update labels turned into its ``InPlaceUpdate`` condition
   (upstream ``updateNodeConditionBasedOnLabel``; before the health check here, so that the
   machine's copy of the conditions is current in the same pass), health check (while an in-place
   update owns the phase only the copy of the node's conditions), node sync, the in-place update
   step (``inplace.reconcile_in_place``); a pass that does not sync its node
   (stopped at 3–5, or no phase yet) hands a node still without its finalizer to the node task
   (``hand_node_over``), which the informer leaves out for a node joining such a machine;
7. machine preservation (upstream ``manageMachinePreservation``, ``preserve.manage_preservation``);
8. no providerID, or phase empty / CrashLoopBackOff → creation flow; else LongRetry.

The pass runs in a ``MachineScope`` (``controllers/machine/scope.py``) that registration builds around
the machine it read (``registration.scoped``); the phases here take it, and hand the machine and its
class context on to the flows of their own modules (health, node sync, in-place, preservation,
creation).

Bad input is reported on the machine (status + Warning Event, written once thanks to the status
de-duplication) and retried at a sensible period, never raised: raising means backoff and, in the
end, the dead-letter list, which is for failures of the controller, not of the user's objects.

Deliberate difference: a Failed machine without a providerID (a stale node, or a create that timed
out) is not created again; upstream would keep launching VMs for it until its MachineSet deletes it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineClass, MachineOperationType, MachinePhase, MachineState
from mcm_tasks.api.constants import MCM_FINALIZER, NODE_FINALIZER, NODE_LABEL_KEY
from mcm_tasks.api.validation import validate_machine, validate_machine_class
from mcm_tasks.cache.layout import object_key
from mcm_tasks.cache.models import Unreadable
from mcm_tasks.controllers.common import context
from mcm_tasks.controllers.common.finalizers import with_finalizer
from mcm_tasks.controllers.common.frozen import frozen_key, is_frozen
from mcm_tasks.controllers.common.registration import scoped
from mcm_tasks.controllers.common.status import is_problem, write_operation, write_problem
from mcm_tasks.controllers.machine import create, health_io, inplace, preserve
from mcm_tasks.controllers.machine.scope import MachineScope
from mcm_tasks.controllers.problems import answers_unreadable, report_unreadable
from mcm_tasks.kinds import Queue
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import is_conflict
from mcm_tasks.queue import Requeue, enqueue
from mcm_tasks.settings import get_settings
from mcm_tasks.tracing import machine_span

log = logging.getLogger(__name__)

RESOLVED_DESCRIPTION = "Machine configuration is valid again"


# --- pure decisions --------------------------------------------------------------------------------------


def machine_problem(machine: Machine) -> str | None:
    errors = validate_machine(machine)
    return None if not errors else "validation of Machine failed: " + "; ".join(str(e) for e in errors)


def class_problem(machine_class: MachineClass) -> str | None:
    errors = validate_machine_class(machine_class)
    if not errors:
        return None
    return f"MachineClass {machine_class.metadata.name} is invalid: " + "; ".join(str(e) for e in errors)


def needs_creation(machine: Machine) -> bool:
    phase = machine.status.current_status.phase
    if phase == MachinePhase.FAILED:
        return False
    return not machine.spec.provider_id or phase in ("", MachinePhase.CRASH_LOOP_BACK_OFF)


def needs_health_check(machine: Machine) -> bool:
    return bool(machine.metadata.labels.get(NODE_LABEL_KEY)) and bool(machine.status.current_status.phase)


def earliest(requeues: Iterable[Requeue | None]) -> Requeue:
    """The soonest requeue, carrying every note (a hold's reason) of the pass."""
    found = [r for r in requeues if r is not None]
    if not found:
        return Requeue.long()
    soonest = min(found, key=lambda r: r.after)
    note = "; ".join(r.note for r in found if r.note)
    return Requeue(soonest.after, note) if note != soonest.note else soonest


# --- the reconcile ---------------------------------------------------------------------------------------


def machine_pass(scope: MachineScope) -> Requeue | None:
    """One pass of upstream ``reconcileClusterMachine`` over the machine its scope read; a Conflict
    (someone wrote the machine since) comes back soon to decide again on a fresh read."""
    try:
        with machine_span(
            "reconcile", scope.machine.metadata.uid or "", machine_key=scope.key, queue="machine"
        ):
            return _reconcile(scope)
    except ApiException as err:
        if is_conflict(err):
            log.debug("machine %s: conflict, retrying soon", scope.key)
            return Requeue.conflict()
        raise


def _read_machine(key: str) -> Machine | None:
    """The machine, read with the mirror's synced kinds in one round trip: the object its scope is
    built around (a scope builder: it reads the process's client and settings)."""
    namespace, name = context.namespace_of(key, get_settings().namespace)
    context.prefetch([(kinds.MACHINE.mirror, object_key(namespace, name))])
    return MachineScope.read(key)


#: the ``machine`` queue's reconciler: the machine's scope (``MachineScope``), then ``machine_pass``
reconcile_machine = answers_unreadable(scoped(_read_machine, machine_pass, MachineScope.begin))


def _add_finalizer(scope: MachineScope) -> Machine:
    """Upstream: ``addMachineFinalizers``; the pass carries on with the machine as written."""
    machine = scope.machine
    patch = {
        "metadata": {
            "resourceVersion": machine.metadata.resource_version,
            "finalizers": with_finalizer(machine.metadata.finalizers, MCM_FINALIZER, True),
        }
    }
    scope.machine = Machine.model_validate(
        ops.patch(
            scope.api, kinds.MACHINE.resource, machine.metadata.name or "", patch, machine.metadata.namespace
        )
    )
    return scope.machine


def _class_phase(scope: MachineScope) -> Requeue | None:
    """Read and validate the machine's class and merge its secrets into ``scope.class_context``; the
    requeue when the machine cannot go on (a problem said on its status), else None."""
    machine = scope.machine
    namespace = machine.metadata.namespace or ""
    class_name = machine.spec.class_.name
    try:
        machine_class = context.get_machine_class(scope.api, class_name, namespace)
    except Unreadable as err:
        report_unreadable(scope, err)
        write_problem(scope, machine, f"MachineClass {class_name} cannot be read: {err.problem}")
        return Requeue.long()
    if machine_class is None:
        write_problem(scope, machine, f"MachineClass {class_name} not found")
        return Requeue.long()
    if MCM_FINALIZER not in machine_class.metadata.finalizers:
        enqueue(Queue.MACHINE_CLASS, object_key(machine_class.metadata.namespace, class_name))
        return Requeue.short()
    problem = class_problem(machine_class)
    if problem:
        write_problem(scope, machine, problem)
        return Requeue.short()
    scope.class_context = context.load_class_context(scope.api, machine_class, scope.settings)
    return None


def _ready(scope: MachineScope) -> Requeue | None:
    """Steps 3 to 5: None when the pass can go on with ``scope.class_context``, else when to come
    back (the problem said on the machine's status). The freeze flag, the class and the node the
    pass reads later come in one round trip (a healthy machine's LongRetry recheck is mostly reads)."""
    machine = scope.machine
    namespace = machine.metadata.namespace or ""
    node_name = machine.metadata.labels.get(NODE_LABEL_KEY, "")
    wanted = [(kinds.MACHINE_CLASS.mirror, object_key(namespace, machine.spec.class_.name))]
    if node_name:
        wanted.append((kinds.NODE.mirror, object_key(None, node_name)))
    flags = context.prefetch(wanted, exists=[frozen_key()])
    if flags[0] if flags else is_frozen():
        log.info("machine %s: machine controller frozen, not reconciling", scope.machine.key)
        return Requeue.long()
    problem = machine_problem(scope.machine)
    if problem:
        write_problem(scope, scope.machine, problem)
        return Requeue.long()
    return _class_phase(scope)


def hand_node_over(scope: MachineScope) -> None:
    """A pass that does not sync its node leaves the node finalizer to the node task: the informer
    does not enqueue that task for a joining node whose machine pass adds the finalizer
    (``informers.routing_target.machine_pass_syncs_node``), so a pass that stopped early, or found
    the machine still without a phase, enqueues it when the node lacks the finalizer (upstream's
    node controller adds it whatever the machine's state). No read for a machine without a node.

    Upstream: ``addNodeFinalizers`` in ``reconcileClusterNode``."""
    node_name = scope.machine.metadata.labels.get(NODE_LABEL_KEY, "")
    if not node_name:
        return
    node = scope.node()
    if node is not None and NODE_FINALIZER not in ((node.get("metadata") or {}).get("finalizers") or ()):
        enqueue(Queue.NODE, node_name)


def _reconcile(scope: MachineScope) -> Requeue | None:
    meta = scope.machine.metadata
    if meta.is_deleting:
        enqueue(Queue.MACHINE_TERMINATION, scope.machine.key)
        return None
    if MCM_FINALIZER not in meta.finalizers:
        _add_finalizer(scope)
    stop = _ready(scope)
    if stop is not None:
        hand_node_over(scope)
        return stop
    cc = scope.class_context
    assert cc is not None
    machine = _resolve_problem(scope)

    requeues: list[Requeue | None] = []
    node = scope.node()
    if needs_health_check(machine):
        node, labelled = inplace.update_node_condition_based_on_label(scope, machine, node)
        requeues.append(labelled)
        if inplace.in_place_owns(machine):  # an in-place update owns the phase meanwhile
            machine = inplace.copy_node_conditions(scope, machine, node)
        else:
            machine, recheck = health_io.reconcile_health(scope, machine, cc, node)
            requeues.append(recheck)
        requeues.append(health_io.sync_node(scope, machine, cc, node))
        machine, updating = inplace.reconcile_in_place(scope, machine, node)
        requeues.append(updating)
    else:
        hand_node_over(scope)
    machine, preserved = preserve.manage_preservation(scope, machine, node)
    requeues.append(preserved)
    if needs_creation(machine):
        requeues.append(create.trigger_creation_flow(scope, machine, cc))
    scope.machine = machine
    return earliest(requeues)


def resolved_operation(machine: Machine) -> tuple[str, MachineState, MachineOperationType] | None:
    """What lastOperation should say once a configuration problem reported on a machine past its
    creation is fixed; None when there is nothing to clear. (In creation, the creation flow overwrites
    it.) A Pending machine gets its create operation back, so that its join is still recognised as
    the first one (bootstrap token, join duration)."""
    if not is_problem(machine.status.last_operation):
        return None
    phase = machine.status.current_status.phase
    if phase == MachinePhase.PENDING:
        return create.CREATING_DESCRIPTION, MachineState.PROCESSING, MachineOperationType.CREATE
    if phase in (MachinePhase.RUNNING, MachinePhase.UNKNOWN, MachinePhase.AVAILABLE):
        return RESOLVED_DESCRIPTION, MachineState.SUCCESSFUL, MachineOperationType.HEALTH_CHECK
    return None


def _resolve_problem(scope: MachineScope) -> Machine:
    resolved = resolved_operation(scope.machine)
    if resolved is not None:
        scope.machine = write_operation(scope, scope.machine, *resolved) or scope.machine
    return scope.machine
