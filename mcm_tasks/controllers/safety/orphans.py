"""Orphan VMs and unmanaged Nodes (upstream ``reconcileClusterMachineSafetyOrphanVMs``,
``checkMachineClasses``, ``AnnotateNodesUnmanagedByMCM``), as pure decisions.

A VM the cloud lists for a class (providerID → machine name) is accounted for when a Machine of that
name carries that providerID, or when the Machine is still being created (phase empty, or
CrashLoopBackOff between create attempts): its providerID is not written yet, so a mismatch proves
nothing. Any other VM is an orphan: no Machine, or a Machine backed by another VM (a second VM left
behind by a create retry). Orphans are deleted from the cloud.

A Node no Machine claims (through the Machine's ``node`` label), once older than the creation timeout
(younger ones may belong to a machine whose label is not set yet), is annotated
``node.machine.sapcloud.io/not-managed-by-mcm=1`` so the node handlers leave it alone, and loses MCM's
node finalizer, which nothing would remove otherwise. A Node claimed by exactly one Machine loses the
annotation again. A Node claimed by several Machines is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from mcm_tasks.api import Machine, MachinePhase
from mcm_tasks.api.constants import (
    NODE_FINALIZER,
    NODE_LABEL_KEY,
    NOT_MANAGED_BY_MCM_ANNOTATION,
    NOT_MANAGED_BY_MCM_VALUE,
)
from mcm_tasks.controllers.common.finalizers import with_finalizer

#: phases in which a machine's VM may exist before its providerID is recorded
CREATING_PHASES = frozenset({"", MachinePhase.CRASH_LOOP_BACK_OFF})


@dataclass(frozen=True)
class MachineFacts:
    """What the orphan job decides on about a Machine: ``facts_of`` a model, or read straight from a
    stored one (``reads.orphan_facts``: the job needs five strings of each machine, not its model)."""

    name: str
    namespace: str = ""
    provider_id: str = ""
    phase: str = ""
    #: the machine's ``node`` label: the Node it claims
    node: str = ""


def facts_of(machine: Machine) -> MachineFacts:
    return MachineFacts(
        machine.metadata.name or "",
        machine.metadata.namespace or "",
        machine.spec.provider_id or "",
        str(machine.status.current_status.phase or ""),
        machine.metadata.labels.get(NODE_LABEL_KEY) or "",
    )


class VMVerdict(StrEnum):
    OWNED = "owned"  # the machine of that name has this providerID
    CREATING = "creating"  # the machine of that name is still being created
    ORPHAN = "orphan"  # delete it


def vm_verdict(provider_id: str, machine: MachineFacts | None) -> VMVerdict:
    if machine is None:
        return VMVerdict.ORPHAN
    if machine.provider_id == provider_id:
        return VMVerdict.OWNED
    if machine.phase in CREATING_PHASES:
        return VMVerdict.CREATING
    return VMVerdict.ORPHAN


@dataclass(frozen=True)
class OrphanVM:
    provider_id: str
    machine_name: str


def orphan_vms(vm_list: Mapping[str, str], machines_by_name: Mapping[str, MachineFacts]) -> list[OrphanVM]:
    """The orphans among a class's VMs (``ListMachines``' providerID → machine name)."""
    return [
        OrphanVM(provider_id, name)
        for provider_id, name in sorted(vm_list.items())
        if vm_verdict(provider_id, machines_by_name.get(name)) is VMVerdict.ORPHAN
    ]


def stub_machine(vm: OrphanVM, namespace: str, class_name: str) -> Machine:
    """What ``DeleteMachine`` gets for an orphan: its name and providerID, nothing else of value."""
    return Machine.model_validate(
        {
            "metadata": {"name": vm.machine_name, "namespace": namespace},
            "spec": {"class": {"kind": "MachineClass", "name": class_name}, "providerID": vm.provider_id},
        }
    )


# --- nodes -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeAction:
    annotate: bool = False
    remove_finalizer: bool = False
    unannotate: bool = False

    @property
    def needed(self) -> bool:
        return self.annotate or self.remove_finalizer or self.unannotate


def _meta(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return node.get("metadata") or {}


def created_at(node: Mapping[str, Any]) -> datetime | None:
    raw = _meta(node).get("creationTimestamp")
    if not raw:
        return None
    try:
        return datetime.fromisoformat(str(raw))
    except ValueError:
        return None


def node_action(
    node: Mapping[str, Any], machine_count: int, now: datetime, creation_timeout: float
) -> NodeAction:
    annotated = NOT_MANAGED_BY_MCM_ANNOTATION in (_meta(node).get("annotations") or {})
    if machine_count == 1:
        return NodeAction(unannotate=annotated)
    if machine_count > 1:
        return NodeAction()
    created = created_at(node)
    if created is None or now - created <= timedelta(seconds=creation_timeout):
        return NodeAction()
    finalized = NODE_FINALIZER in (_meta(node).get("finalizers") or [])
    return NodeAction(annotate=not annotated, remove_finalizer=finalized)


#: how the annotation's key shows in a Node's stored JSON (a key needs no escaping)
_ANNOTATION_BYTES = f'"{NOT_MANAGED_BY_MCM_ANNOTATION}"'.encode()


def may_need_action(stored: bytes, machine_count: int) -> bool:
    """Whether ``node_action`` may ask for anything for a node stored as this JSON, without decoding
    it: a node claimed by several machines is left as it is; one claimed by one machine changes only
    when it carries the not-managed annotation, whose key its JSON then contains (anywhere else too,
    in a label say, only costs a decode); an unclaimed one may be marked."""
    if machine_count > 1:
        return False
    if machine_count == 1:
        return _ANNOTATION_BYTES in stored
    return True


def node_patch(node: Mapping[str, Any], action: NodeAction) -> dict[str, Any] | None:
    """A merge patch doing ``action``, conditional on the node's resourceVersion; None when idle."""
    if not action.needed:
        return None
    meta = _meta(node)
    patch: dict[str, Any] = {"resourceVersion": meta.get("resourceVersion")}
    if action.annotate:
        patch["annotations"] = {NOT_MANAGED_BY_MCM_ANNOTATION: NOT_MANAGED_BY_MCM_VALUE}
    elif action.unannotate:
        patch["annotations"] = {NOT_MANAGED_BY_MCM_ANNOTATION: None}
    if action.remove_finalizer:
        patch["finalizers"] = with_finalizer(meta.get("finalizers"), NODE_FINALIZER, False)
    return {"metadata": patch}


def machine_counts_by_node(machines: Iterable[MachineFacts]) -> dict[str, int]:
    """How many machines claim each node name through their ``node`` label."""
    counts: dict[str, int] = {}
    for m in machines:
        if m.node:
            counts[m.node] = counts.get(m.node, 0) + 1
    return counts
