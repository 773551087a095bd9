"""The writes of manageReplicas: creating machines in slow-start batches and terminating machines,
each with its expectations, Events and (for deletions) the Terminating status.

Expectations (``mcm_tasks.queue.expectations``) are recorded before the writes and lowered for every
write that will never be observed (a create skipped after a failing batch or refused, a DELETE that
failed), so the informer's observations bring them to zero exactly when the cache has caught up.
They are closed once every write was issued: a pass that dies mid-way leaves them open, which the
set's next pass recognises (its recording pass is dead) and ends on a live list of its machines.
Within a batch the calls run concurrently on a small per-process thread pool, as MCM runs them on
goroutines; the rate limit shared through Redis still bounds them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from mcm_tasks import kinds
from mcm_tasks.api import (
    API_VERSION,
    Machine,
    MachineOperationType,
    MachinePhase,
    MachineSet,
    MachineState,
    dump,
    new_controller_ref,
)
from mcm_tasks.api.constants import EFFECTIVE_CREATION_TIMEOUT_ANNOTATION, MCM_FINALIZER
from mcm_tasks.controllers.common.events import recorder
from mcm_tasks.controllers.common.finalizers import with_finalizer
from mcm_tasks.controllers.common.lagging_io import wake
from mcm_tasks.controllers.common.status_io import write_operation
from mcm_tasks.controllers.machineset import metrics_io
from mcm_tasks.controllers.machineset.replicas import is_failed, slow_start
from mcm_tasks.controllers.machineset.scope import MachineSetScope
from mcm_tasks.kinds import Queue
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe, is_conflict, is_not_found, is_timeout
from mcm_tasks.kube.events import NORMAL, WARNING
from mcm_tasks.queue import expectations

log = logging.getLogger(__name__)

SUCCESSFUL_CREATE: Final = "SuccessfulCreate"
FAILED_CREATE: Final = "FailedCreate"
SUCCESSFUL_DELETE: Final = "SuccessfulDelete"
FAILED_DELETE: Final = "FailedDelete"
DELETING_DESCRIPTION: Final = "Deleting machine from cloud provider"
#: concurrent API calls of one batch; below the client's connection pool so connections are reused
POOL_SIZE: Final = 8


# --- per-process helpers ---------------------------------------------------------------------------------

_pools: dict[int, ThreadPoolExecutor] = {}


def _pool() -> ThreadPoolExecutor:
    """One pool per process: a pool inherited through fork has no threads behind it."""
    pid = os.getpid()
    pool = _pools.get(pid)
    if pool is None:
        pool = _pools[pid] = ThreadPoolExecutor(POOL_SIZE, thread_name_prefix="machineset")
    return pool


def run_concurrently(n: int, fn: Callable[[], None]) -> list[Exception | None]:
    """A slow-start batch: ``n`` calls at once, each call's error or None."""
    if n == 1:
        try:
            fn()
        except Exception as err:
            return [err]
        return [None]
    futures = [_pool().submit(fn) for _ in range(n)]
    return [f.exception() for f in futures]  # type: ignore[misc]


def _each_concurrently(items: Sequence[Any], fn: Callable[[Any], None]) -> list[Exception | None]:
    futures = [_pool().submit(fn, item) for item in items]
    return [f.exception() for f in futures]  # type: ignore[misc]


# --- creation --------------------------------------------------------------------------------------------


def new_machine(machine_set: MachineSet) -> dict[str, Any]:
    """A machine stamped from the set's template: generateName ``<set>-``, the template's labels,
    annotations and finalizers, its spec, and the set as controller (blocking its foreground deletion).

    The MCM machine finalizer is in it from the start (after the template's): upstream's
    ``CreateMachinesWithControllerRef`` leaves it to the machine controller's first pass
    (``addMachineFinalizers``), one API write per machine that no observer needs, since that pass
    adds it before anything else anyway. A machine deleted before any machine pass goes through
    the deletion flow like any other (no VM found, no node: straight to the finalizer removal)."""
    template = machine_set.spec.template
    annotations = dict(template.metadata.annotations)
    timeout = machine_set.metadata.annotations.get(EFFECTIVE_CREATION_TIMEOUT_ANNOTATION)
    if timeout:
        annotations[EFFECTIVE_CREATION_TIMEOUT_ANNOTATION] = timeout
    metadata: dict[str, Any] = {
        "generateName": f"{machine_set.metadata.name}-",
        "namespace": machine_set.metadata.namespace,
        "labels": dict(template.metadata.labels),
        "ownerReferences": [dump(new_controller_ref(machine_set))],
    }
    if annotations:
        metadata["annotations"] = annotations
    metadata["finalizers"] = with_finalizer(template.metadata.finalizers, MCM_FINALIZER, True)
    return {"apiVersion": API_VERSION, "kind": "Machine", "metadata": metadata, "spec": dump(template.spec)}


def create_machines(
    scope: MachineSetScope, machine_set: MachineSet, count: int
) -> tuple[int, Exception | None]:
    """Create ``count`` machines in slow-start batches; (created, the first error).

    The expectations are closed (``expectations.issued``) once every create was issued, the ones
    skipped or refused lowered with it: a pass that dies before leaves them open, and the set's
    next pass ends them on a live list of its machines (``expectations.state_for_pass``)."""
    api, key = scope.api, scope.key
    body = new_machine(machine_set)
    expectations.expect_creations(key, count)
    events = recorder(api)
    made: list[str] = []

    def create_one() -> None:
        try:
            created = ops.create(api, kinds.MACHINE.resource, body, machine_set.metadata.namespace)
        except Exception as err:
            if is_timeout(err):
                # it may exist after all: the informer will observe it, or the expectation expires
                return
            events.event(
                machine_set, WARNING, FAILED_CREATE, f"Error creating: {describe(err)}", action="Create"
            )
            raise
        name = (created.get("metadata") or {}).get("name")
        made.append(f"{machine_set.metadata.namespace}/{name}")
        events.event(machine_set, NORMAL, SUCCESSFUL_CREATE, f"Created Machine: {name}", action="Create",
                     related=created)  # fmt: skip

    created, error = slow_start(count, create_one, run_concurrently)
    skipped = count - created
    if skipped > 0:
        log.info("MachineSet %s: slow start stopped after %d of %d creations: %s",
                 key, created, count, describe(error) if error else "")  # fmt: skip
    expectations.issued(key, skipped)
    wake(scope.settings, ((Queue.MACHINE, k) for k in made))  # while the mirror lags: need not wait for it
    return created, error


# --- termination -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Terminated:
    """What ``terminate_machines`` did: the first error, and how many machines it left because
    they changed since the pass read them (their DELETE's resourceVersion precondition failed)."""

    error: Exception | None = None
    changed: int = 0


def terminate_machines(
    scope: MachineSetScope, machine_set: MachineSet, machines: Sequence[Machine], *, expect: bool = True
) -> Terminated:
    """DELETE each machine (those not already deleting) and mark it Terminating.

    Each DELETE is conditional on the machine's uid and on the resourceVersion the pass read:
    another controller may have taken the machine meanwhile (an in-place update's deployment moves
    it to the new set, and its old set, scaled down in the same breath, is woken by that write
    through the sets' watch before the machines' watch shows the move). Deleting on a stale read
    would destroy a machine that is no longer this set's; the Conflict leaves it, and the pass
    comes back soon to decide again on a fresh read (``Terminated.changed``).

    ``expect``: record deletion expectations (manageReplicas); a set being deleted does not wait
    on them.
    Upstream: ``terminateMachines`` (unconditional there).
    """
    api, key = scope.api, scope.key
    targets = [m for m in machines if not m.metadata.is_deleting]
    if not targets:
        return Terminated()
    changed: list[str] = []
    if expect:
        expectations.expect_deletions(key, [m.metadata.name or "" for m in targets])
    events = recorder(api)

    def delete_one(machine: Machine) -> None:
        name = machine.metadata.name or ""
        try:
            answer = ops.delete(
                api,
                kinds.MACHINE.resource,
                name,
                machine.metadata.namespace,
                uid=machine.metadata.uid,
                resource_version=machine.metadata.resource_version,
            )
        except Exception as err:
            if expect:
                # idempotent per name: lowering it here is safe even if the informer saw it go
                expectations.deletion_observed(key, name)
            if is_not_found(err):
                return  # gone already
            if is_conflict(err):
                # changed since read (moved to another set?), or a namesake with another uid
                log.info("MachineSet %s: machine %s changed since read; not deleted", key, name)
                changed.append(name)
                return
            message = f"Error deleting: {describe(err)}"
            events.event(machine_set, WARNING, FAILED_DELETE, message, action="Delete", related=machine)
            raise
        events.event(machine_set, NORMAL, SUCCESSFUL_DELETE, f"Deleted machine: {name}", action="Delete",
                     related=machine)  # fmt: skip
        if is_failed(machine) and machine.status.last_operation.type == MachineOperationType.HEALTH_CHECK:
            metrics_io.count_stale_machine_removed()
        if answer and answer.get("kind") == "Machine":
            mark_terminating(scope, Machine.model_validate(answer))

    results = _each_concurrently(targets, delete_one)
    if expect:
        expectations.issued(key)
    wake(scope.settings, ((Queue.MACHINE_TERMINATION, m.key) for m in targets))  # while the mirror lags
    return Terminated(next((r for r in results if r is not None), None), len(changed))


def mark_terminating(scope: MachineSetScope, machine: Machine) -> None:
    """MCM's status after its DELETE: Terminating, "Deleting machine from cloud provider". Best effort:
    the machine controller reaches the same state when it handles the deletion."""
    current = [machine]

    def attempt() -> None:
        obj = current[0]
        if str(obj.status.current_status.phase) == MachinePhase.TERMINATING:
            return
        try:
            write_operation(
                scope,
                obj,
                DELETING_DESCRIPTION,
                MachineState.PROCESSING,
                MachineOperationType.DELETE,
                phase=MachinePhase.TERMINATING,
            )
        except Exception as err:
            if is_conflict(err):
                fresh = ops.get(
                    scope.api, kinds.MACHINE.resource, obj.metadata.name or "", obj.metadata.namespace
                )
                current[0] = Machine.model_validate(fresh)
            raise

    try:
        ops.retry_on_conflict(attempt)
    except Exception as err:
        if not is_not_found(err):
            log.warning("machine %s: could not mark it Terminating: %s", machine.key, describe(err))
