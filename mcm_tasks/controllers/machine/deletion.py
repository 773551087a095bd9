"""The deletion flow (upstream ``triggerDeletionFlow``), driven by ``status.lastOperation.description``
exactly as MCM drives it: each description names the next step, and each step writes the next description
before anything else runs, so a person reading the Machine sees MCM's words and any worker can pick the
flow up.

Steps (``deletion_io``, one function each), matched by the constants MCM's descriptions contain, in
MCM's order:

1. phase not Terminating (or a description no step recognises): phase Terminating, "Set machine
   status to termination. Now, getting VM Status";
2. find the node (``node`` label, else the Node labelled with the machine's name, else
   GetMachineStatus), label the machine with it → "Initiate node drain";
3. drain (``drain.drain_step``) → "Drain successful. Initiate VM deletion", or when forced
   "Force Drain successful. Delete Volume Attachments";
4. "Delete Volume Attachments": delete the node's live VolumeAttachments, then → VM deletion;
5. "Initiate VM deletion": the Driver's DeleteMachine → "… Initiate node object deletion";
6. remove the node finalizer and delete the Node → "… Initiate machine object finalizer removal";
7. remove the Machine's finalizer: the API server then deletes it.

mcm-tasks's own on top (``deleting``): a pre-drain hook annotation holds the flow at step 3 before the
cordon, a pre-terminate hook at step 5 before the Driver is called; the deployment's timeouts bound
the waits of steps 4 and 6; and every status the flow writes carries the machine's ``Deleting``
condition, derived from its description (``_write``).

A step that moves on runs the next one at once, in the same pass, on the Machine as it left it (up to
``deletion_steps_per_pass`` steps), and the pass writes the status once, where it stops: at the step it
waits at, a failure (its description and state), a requeue, or the end of its step budget. Upstream
returns an error to be requeued at once, runs the next step in the next pass and writes every step's
description; a pass per step costs a queue round trip, a countdown and a fresh read per step and
machine, and descriptions written moments apart are seen by no poller but the last. A deliberate
difference from MCM, so: a machine whose deletion flows straight through shows its phase Terminating
and "… getting VM Status" (step 1 is always its own write, so the phase says Terminating while the node
drains), then the description it waits or fails at; every waiting and failure description and every
Event is MCM's. A pass that ends by removing the finalizer writes no pending status at all (the Machine
is gone). A metadata write within the pass (the ``node`` label) carries its resourceVersion on to the
later writes.

Crash safety holds because every step is idempotent (VM not found moves on, a Node gone moves on,
the drain of a drained node succeeds): a worker that dies mid-pass leaves the flow at the last
written description, and the next pass repeats the steps after it. A pass that stops after a step
that moved on comes back after ConflictRetry.
"""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException

from mcm_tasks.api import Machine, MachineStatus
from mcm_tasks.controllers.common import context_io, status_io
from mcm_tasks.controllers.common.registration import scoped
from mcm_tasks.controllers.machine.deleting import with_deleting_condition
from mcm_tasks.controllers.machine.deletion_io import Continue, Stop, step
from mcm_tasks.controllers.machine.drain.state_io import DrainStore
from mcm_tasks.controllers.machine.scope import MachineScope
from mcm_tasks.controllers.problems_io import answers_unreadable
from mcm_tasks.kube.errors import is_conflict, is_not_found
from mcm_tasks.queue import Requeue
from mcm_tasks.tracing import machine_span

log = logging.getLogger(__name__)


def termination_pass(scope: MachineScope) -> Requeue | None:
    """A pass of upstream ``triggerDeletionFlow`` over the machine its scope read, if it is being
    deleted; a Conflict comes back soon to decide again on a fresh read. A NotFound for a machine the
    API server no longer has is the flow's end, not a failure: an event during the pass that removed
    the finalizer runs the key once more, and the mirror may still hold the machine then."""
    if not scope.machine.metadata.is_deleting:
        return None
    try:
        uid = scope.machine.metadata.uid or ""
        with machine_span("reconcile deletion", uid, machine_key=scope.key, queue="machine-termination"):
            return terminate(scope)
    except ApiException as err:
        if is_conflict(err):
            return Requeue.conflict()
        machine = scope.machine
        name, namespace = machine.metadata.name or "", machine.metadata.namespace or ""
        if is_not_found(err) and context_io.get_machine_live(scope.api, name, namespace) is None:
            log.info("machine %s: gone before its deletion pass ended (its deletion was complete)", scope.key)
            return None
        raise


def _forget_drain(key: str) -> None:
    DrainStore().clear(key)


#: the ``machine-termination`` queue's reconciler (and the machine queue's for deleting machines): the
#: machine's scope, then ``termination_pass``; a machine gone leaves no drain progress behind
reconcile_termination = answers_unreadable(
    scoped(MachineScope.read, termination_pass, MachineScope.begin, gone=_forget_drain)
)


def terminate(scope: MachineScope) -> Requeue | None:
    """The deletion flow for the scope's machine: the fold of ``deletion_io.DELETION_STEPS``, the step
    the machine's description asks for, then the next while each moves the flow on (``Continue``, at
    most ``deletion_steps_per_pass``), its status written once where the pass stops (as Cluster API
    patches once at the end of ``doReconcile``). The steps share what the pass read (``MachineScope``:
    the class, the Node) and one drain store.

    A creation still running (MCM's pendingMachineCreationMap) holds the flow back. It is asked once
    per pass: none can start once the machine is seen deleting, which is how this pass began.
    """
    if context_io.creation_in_progress(scope.machine.key):
        return Requeue.medium()
    unwritten = False
    for _ in range(scope.settings.deletion_steps_per_pass):
        result = step(scope)
        machine = scope.machine
        if isinstance(result, Continue):
            scope.machine, unwritten = result.machine, unwritten or result.unwritten
            continue
        if isinstance(result, Stop):  # a status where the previous one was written: never de-duplicated
            _write(scope, machine, result.status, dedup=not (result.moves or unwritten), detail=result.detail)
            return result.requeue
        if result is not None and unwritten:  # waits, or requeues, at the step it moved on to
            _write(scope, machine, machine.status, dedup=False)
        return result  # None: the finalizer is gone, and the Machine with it: nothing left to write
    if unwritten:
        _write(scope, scope.machine, scope.machine.status, dedup=False)
    return Requeue.conflict()


def _write(
    scope: MachineScope, machine: Machine, new: MachineStatus, *, dedup: bool, detail: str = ""
) -> None:
    """Every status the flow writes carries its ``Deleting`` condition, derived from its description
    and what holds the step (``detail``; ``deleting.with_deleting_condition``, the one place)."""
    status_io.update_machine_status(
        scope, machine, with_deleting_condition(new, scope.clock(), detail), dedup=dedup
    )
