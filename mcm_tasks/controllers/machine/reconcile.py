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
   step (``inplace_io.reconcile_in_place``); a pass that does not sync its node
   (stopped at 3–5, or no phase yet) hands a node still without its finalizer to the node task
   (``hand_node_over``), which the informer leaves out for a node joining such a machine;
7. machine preservation (upstream ``manageMachinePreservation``, ``preserve_io.manage_preservation``);
8. no providerID, or phase empty / CrashLoopBackOff → creation flow; else LongRetry.

The pass runs in a ``MachineScope`` (``controllers/machine/scope.py``) that registration builds around
the machine it read (``registration.scoped``). It is the list ``MACHINE_PHASES``, one function of the
scope per step above, folded by ``common.phases.run_phases`` (Cluster API's ``doReconcile``): each
phase hands the scope's machine, its class context and its Node to the flow of its own module
(health, node sync, in-place, preservation, creation), keeps the machine as the flow left it, and
answers when the machine wants its next pass; the pass answers the soonest.

Bad input is reported on the machine (status + Warning Event, written once thanks to the status
de-duplication) and retried at a sensible period, never raised: raising means backoff and, in the
end, the dead-letter list, which is for failures of the controller, not of the user's objects.

Deliberate difference: a Failed machine without a providerID (a stale node, or a create that timed
out) is not created again; upstream would keep launching VMs for it until its MachineSet deletes it.
"""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineClass, MachineOperationType, MachinePhase, MachineState
from mcm_tasks.api.constants import MCM_FINALIZER, NODE_FINALIZER, NODE_LABEL_KEY
from mcm_tasks.api.validation import validate_machine, validate_machine_class
from mcm_tasks.cache.layout import object_key
from mcm_tasks.cache.models import Unreadable
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.context_io import ClassContext
from mcm_tasks.controllers.common.finalizers import with_finalizer
from mcm_tasks.controllers.common.frozen_io import frozen_key, is_frozen
from mcm_tasks.controllers.common.lagging_io import mirror_lagging
from mcm_tasks.controllers.common.phases import Halt, Phase, PhaseResult, run_phases
from mcm_tasks.controllers.common.registration import scoped
from mcm_tasks.controllers.common.status import is_problem
from mcm_tasks.controllers.common.status_io import write_operation, write_problem
from mcm_tasks.controllers.machine import create_io, health_io, inplace_io, preserve_io
from mcm_tasks.controllers.machine.scope import MachineScope
from mcm_tasks.controllers.problems_io import answers_unreadable, report_unreadable
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


# --- the reconcile ---------------------------------------------------------------------------------------


def machine_pass(scope: MachineScope) -> Requeue | None:
    """One pass of upstream ``reconcileClusterMachine`` over the machine its scope read; a Conflict
    (someone wrote the machine since) comes back soon to decide again on a fresh read."""
    try:
        with machine_span(
            "reconcile", scope.machine.metadata.uid or "", machine_key=scope.key, queue="machine"
        ):
            return run_phases(scope, MACHINE_PHASES)
    except ApiException as err:
        if is_conflict(err):
            log.debug("machine %s: conflict, retrying soon", scope.key)
            return Requeue.conflict()
        raise


def _read_machine(key: str) -> Machine | None:
    """The machine, read with the mirror's synced kinds in one round trip: the object its scope is
    built around (a scope builder: it reads the process's client and settings)."""
    namespace, name = context_io.namespace_of(key, get_settings().namespace)
    context_io.prefetch([(kinds.MACHINE.mirror, object_key(namespace, name))])
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
        machine_class = context_io.get_machine_class(scope.api, class_name, namespace)
    except Unreadable as err:
        report_unreadable(scope, err)
        write_problem(scope, machine, f"MachineClass {class_name} cannot be read: {err.problem}")
        return Requeue.long()
    if machine_class is None:
        write_problem(scope, machine, f"MachineClass {class_name} not found")
        return Requeue.long()
    lagging = MCM_FINALIZER not in machine_class.metadata.finalizers and mirror_lagging(scope.settings)
    if lagging:  # a new class: its pass may have added the finalizer, which the late mirror lacks
        machine_class = context_io.get_machine_class_live(scope.api, class_name, namespace) or machine_class
    if MCM_FINALIZER not in machine_class.metadata.finalizers:
        enqueue(Queue.MACHINE_CLASS, object_key(machine_class.metadata.namespace, class_name))
        # while the mirror lags, back as soon as the class pass may have added it, to read it live
        return Requeue(scope.settings.mirror_lag_node_poll) if lagging else Requeue.short()
    problem = class_problem(machine_class)
    if problem:
        write_problem(scope, machine, problem)
        return Requeue.short()
    scope.class_context = context_io.load_class_context(scope.api, machine_class, scope.settings)
    return None


def _ready(scope: MachineScope) -> Requeue | None:
    """Steps 3 to 5: None when the pass can go on with ``scope.class_context``, else when to come
    back (the problem said on the machine's status). The freeze flag, the class, its secrets (as
    the class last named them: ``likely_class_secrets``) and the node the pass reads later come in
    one round trip (a healthy machine's LongRetry recheck is mostly reads)."""
    machine = scope.machine
    namespace = machine.metadata.namespace or ""
    node_name = machine.metadata.labels.get(NODE_LABEL_KEY, "")
    class_name = machine.spec.class_.name
    wanted = [(kinds.MACHINE_CLASS.mirror, object_key(namespace, class_name))]
    wanted += context_io.likely_class_secrets(class_name, namespace)
    if node_name:
        wanted.append((kinds.NODE.mirror, object_key(None, node_name)))
    flags = context_io.prefetch(wanted, exists=[frozen_key()])
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


def _to_termination(scope: MachineScope) -> PhaseResult:
    """Step 2: a machine being deleted is the deletion flow's (``machine-termination``)."""
    if scope.machine.metadata.is_deleting:
        enqueue(Queue.MACHINE_TERMINATION, scope.machine.key)
        return Halt()
    return None


def _finalizer(scope: MachineScope) -> PhaseResult:
    """Step 1 (after the deletion check, which needs no finalizer): ``addMachineFinalizers``."""
    if MCM_FINALIZER not in scope.machine.metadata.finalizers:
        _add_finalizer(scope)
    return None


def _ready_or_halt(scope: MachineScope) -> PhaseResult:
    """Steps 3 to 5 (``_ready``); a pass they stop hands the node over (``hand_node_over``)."""
    stop = _ready(scope)
    if stop is not None:
        hand_node_over(scope)
        return Halt(stop)
    return None


def _problem_resolved(scope: MachineScope) -> PhaseResult:
    _resolve_problem(scope)
    return None


def _class_context(scope: MachineScope) -> ClassContext:
    """The class context ``_ready`` loaded: every phase after it runs with one."""
    cc = scope.class_context
    assert cc is not None
    return cc


def _node_condition(scope: MachineScope) -> PhaseResult:
    """Upstream ``updateNodeConditionBasedOnLabel``; the pass goes on with the Node as it left it."""
    if not needs_health_check(scope.machine):
        return None
    node, labelled = inplace_io.update_node_condition_based_on_label(scope, scope.machine, scope.node())
    scope.node_written(node)
    return labelled


def _health(scope: MachineScope) -> PhaseResult:
    """The health check; while an in-place update owns the phase, only the copy of the node's
    conditions."""
    if not needs_health_check(scope.machine):
        return None
    if inplace_io.in_place_owns(scope.machine):
        scope.machine = inplace_io.copy_node_conditions(scope, scope.machine, scope.node())
        return None
    scope.machine, recheck = health_io.reconcile_health(
        scope, scope.machine, _class_context(scope), scope.node()
    )
    return recheck


def _node_sync(scope: MachineScope) -> PhaseResult:
    """Node sync; a pass that does not sync its node hands it over (``hand_node_over``)."""
    if not needs_health_check(scope.machine):
        hand_node_over(scope)
        return None
    return health_io.sync_node(scope, scope.machine, _class_context(scope), scope.node())


def _in_place(scope: MachineScope) -> PhaseResult:
    if not needs_health_check(scope.machine):
        return None
    scope.machine, updating = inplace_io.reconcile_in_place(scope, scope.machine, scope.node())
    return updating


def _preservation(scope: MachineScope) -> PhaseResult:
    """Upstream ``manageMachinePreservation``."""
    scope.machine, preserved = preserve_io.manage_preservation(scope, scope.machine, scope.node())
    return preserved


def _creation(scope: MachineScope) -> PhaseResult:
    """Upstream ``triggerCreationFlow``, for a machine without a VM yet (``needs_creation``)."""
    if not needs_creation(scope.machine):
        return None
    return create_io.trigger_creation_flow(scope, scope.machine, _class_context(scope))


def _lag_poll(scope: MachineScope) -> PhaseResult:
    """While the mirror lags, a Pending machine comes back every ``--mirror-lag-node-poll`` to read
    its Node from the API server (``MachineScope.waits_under_lag``), not after the Node's late event."""
    return Requeue(scope.settings.mirror_lag_node_poll) if scope.waits_under_lag() else None


#: upstream ``reconcileClusterMachine``, in its order (the module's steps), folded by ``run_phases``
MACHINE_PHASES: tuple[Phase[MachineScope], ...] = (
    _to_termination,
    _finalizer,
    _ready_or_halt,
    _problem_resolved,
    _node_condition,
    _health,
    _node_sync,
    _in_place,
    _preservation,
    _creation,
    _lag_poll,
)


def resolved_operation(machine: Machine) -> tuple[str, MachineState, MachineOperationType] | None:
    """What lastOperation should say once a configuration problem reported on a machine past its
    creation is fixed; None when there is nothing to clear. (In creation, the creation flow overwrites
    it.) A Pending machine gets its create operation back, so that its join is still recognised as
    the first one (bootstrap token, join duration)."""
    if not is_problem(machine.status.last_operation):
        return None
    phase = machine.status.current_status.phase
    if phase == MachinePhase.PENDING:
        return create_io.CREATING_DESCRIPTION, MachineState.PROCESSING, MachineOperationType.CREATE
    if phase in (MachinePhase.RUNNING, MachinePhase.UNKNOWN, MachinePhase.AVAILABLE):
        return RESOLVED_DESCRIPTION, MachineState.SUCCESSFUL, MachineOperationType.HEALTH_CHECK
    return None


def _resolve_problem(scope: MachineScope) -> Machine:
    resolved = resolved_operation(scope.machine)
    if resolved is not None:
        scope.machine = write_operation(scope, scope.machine, *resolved) or scope.machine
    return scope.machine
