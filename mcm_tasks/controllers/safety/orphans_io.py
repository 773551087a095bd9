"""The orphan job's I/O: list each class's VMs through its driver, delete the orphans, then sweep Nodes.

A class whose secrets or provider are missing, whose ``ListMachines`` fails, or whose content makes
any step raise, is skipped with a Warning Event on it and the others still run: one broken class must
not keep the cloud of the others from being cleaned (the next period tries it again). Each orphan is
confirmed against the API server right before its deletion, so a mirror that lags a just-created
Machine cannot cost that machine its VM.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

from mcm_tasks import kinds
from mcm_tasks.api import MachineClass
from mcm_tasks.cache.layout import object_key
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.controllers.problems_io import warn
from mcm_tasks.controllers.safety import reads_io
from mcm_tasks.controllers.safety.orphans import (
    MachineFacts,
    OrphanVM,
    VMVerdict,
    facts_of,
    machine_counts_by_node,
    node_action,
    node_patch,
    orphan_vms,
    stub_machine,
    vm_verdict,
)
from mcm_tasks.controllers.safety.scope import SafetyScope
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe, is_conflict, is_not_found
from providers import MachineError, UnknownProviderError, get_driver
from providers.driver import DeleteMachineRequest, Driver, ListMachinesRequest, Secret

log = logging.getLogger(__name__)

CLASS_SKIPPED_REASON: Final = "OrphanCollectionSkipped"
MAX_MESSAGE = 600


@dataclass
class OrphanReport:
    """What one pass did, for the log line and the tests."""

    classes: int = 0
    vms: int = 0
    deleted: int = 0
    skipped_classes: int = 0
    annotated_nodes: int = 0
    unannotated_nodes: int = 0


def collect_orphans(scope: SafetyScope) -> OrphanReport:
    """The orphan job (upstream ``checkMachineClasses``, then ``AnnotateNodesUnmanagedByMCM``)."""
    report = OrphanReport()
    machines = reads_io.machines_for_orphans(scope)
    by_name = {m.name: m for m in machines}
    for machine_class in reads_io.machine_classes(scope):
        report.classes += 1
        try:
            _collect_class(scope, machine_class, by_name, report)
        except Exception as err:  # one class's content or cloud must not stop the others
            _skip(scope, machine_class, report, f"{type(err).__name__}: {err}")
    sweep_nodes(scope, machines, report)
    log.info(
        "orphan collection: %d classes (%d skipped), %d VMs, %d orphans deleted; nodes: %d marked not "
        "managed, %d unmarked",
        report.classes,
        report.skipped_classes,
        report.vms,
        report.deleted,
        report.annotated_nodes,
        report.unannotated_nodes,
    )
    return report


def _collect_class(
    scope: PassScope[Any], machine_class: MachineClass, by_name: dict[str, MachineFacts], report: OrphanReport
) -> None:
    """Upstream: ``checkMachineClass``."""
    class_ctx = context_io.load_class_context(scope.api, machine_class, scope.settings)
    if class_ctx.missing_secrets:
        _skip(scope, machine_class, report, f"secrets missing: {', '.join(class_ctx.missing_secrets)}")
        return
    try:
        driver = get_driver(machine_class.provider)
        listed = driver.list_machines(
            ListMachinesRequest(machine_class=machine_class, secret=class_ctx.secret)
        )
    except (UnknownProviderError, MachineError) as err:
        _skip(scope, machine_class, report, f"cannot list its VMs: {err}")
        return
    report.vms += len(listed.machine_list)
    for vm in orphan_vms(listed.machine_list, by_name):
        if _delete_orphan(scope, driver, machine_class, class_ctx.secret, vm):
            report.deleted += 1


def _skip(scope: PassScope[Any], machine_class: MachineClass, report: OrphanReport, why: str) -> None:
    """A class whose VMs cannot be listed: said on the class, and the job goes on with the others (the
    next period tries it again)."""
    message = f"orphan VM collection skipped this class: {why}"[:MAX_MESSAGE]
    log.warning("orphan collection: class %s: %s", machine_class.key, message)
    report.skipped_classes += 1
    warn(scope, machine_class, CLASS_SKIPPED_REASON, message)


def _confirmed(scope: PassScope[Any], vm: OrphanVM, namespace: str) -> bool:
    """The API server agrees the VM is an orphan, and no create of that machine is running."""
    if context_io.creation_in_progress(object_key(namespace, vm.machine_name)):
        return False
    try:
        live = reads_io.machine_live(scope, vm.machine_name, namespace)
    except Exception as err:
        log.warning(
            "orphan VM %s: cannot confirm machine %s: %s", vm.provider_id, vm.machine_name, describe(err)
        )
        return False
    return vm_verdict(vm.provider_id, None if live is None else facts_of(live)) is VMVerdict.ORPHAN


def _delete_orphan(
    scope: PassScope[Any], driver: Driver, machine_class: MachineClass, secret: Secret, vm: OrphanVM
) -> bool:
    namespace = machine_class.metadata.namespace or scope.settings.namespace
    class_name = machine_class.metadata.name or ""
    if not _confirmed(scope, vm, namespace):
        return False
    stub = stub_machine(vm, namespace, class_name)
    try:
        driver.delete_machine(DeleteMachineRequest(machine=stub, machine_class=machine_class, secret=secret))
    except MachineError as err:
        log.warning(
            "orphan VM %s (machine %s, class %s): delete failed: %s",
            vm.provider_id,
            vm.machine_name,
            class_name,
            err,
        )
        return False
    log.info("orphan VM %s (machine %s, class %s) deleted", vm.provider_id, vm.machine_name, class_name)
    return True


def sweep_nodes(scope: SafetyScope, machines: list[MachineFacts], report: OrphanReport) -> None:
    """Mark Nodes no machine claims as not managed by MCM, and unmark claimed ones (upstream
    ``AnnotateNodesUnmanagedByMCM``)."""
    api = scope.target
    counts = machine_counts_by_node(machines)
    nodes = reads_io.nodes_to_judge(scope, counts)
    if nodes is None or api is None:
        return
    now = scope.clock()
    timeout = scope.settings.machine_creation_timeout
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name") or "")
        action = node_action(node, counts.get(name, 0), now, timeout)
        patch = node_patch(node, action)
        if patch is None:
            continue
        try:
            ops.patch(api, kinds.NODE.resource, name, patch)
        except Exception as err:
            if is_conflict(err) or is_not_found(err):
                log.debug("node %s changed or went away; the next pass looks again", name)
                continue
            raise
        if action.annotate:
            report.annotated_nodes += 1
            log.info("node %s: no machine backs it, marked not managed by MCM", name)
        if action.unannotate:
            report.unannotated_nodes += 1
            log.info("node %s: backed by a machine again, no longer marked not managed", name)
