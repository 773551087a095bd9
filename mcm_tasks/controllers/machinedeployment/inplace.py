"""The InPlaceUpdate strategy (upstream ``rolloutInPlace`` and its helpers in
``deployment_inplace.go``): machines keep their VMs; their Nodes are updated by the node agent and
the machines move from the old MachineSets to the new one.

A pass, as upstream: old sets get the ``scale-up-disabled`` label (they must not replace a machine
that leaves them), the autoscaler's scale-down protection and the PreferNoSchedule taint; their
Nodes the ``candidate-for-update`` label. Then one kind of step: the new set takes the machines
whose update succeeded (owner reference and selector labels moved, the old set scaled down, the new
one up, the Node's update labels cleared and the Node uncordoned); or, with nothing to take, the
old sets are scaled to zero once the new set is full (maxSurge) or — under ``Auto`` — more Nodes are
selected for update within ``inPlaceUpdate.maxUnavailable`` (under ``Manual`` an operator labels
them ``selected-for-update``). Then the status, and when the rollout is complete the usual
completion (protection off, taint off, old sets cleaned up).

A machine being moved carries the label ``update-result=successful`` until the new set counts it;
meanwhile neither set creates nor deletes machines (``machineset.replicas``). It leaves its old set
without the preserve annotation ``auto-preserved`` (upstream MCM #1137: a stale mark, written by
the old set's auto-preservation, that the new set would count against its own maximum); a user's
``now``/``when-failed``/``false`` goes with it.

Every pass also clears the update labels off the Node of each machine of the new set whose update
succeeded and uncordons it (upstream ``syncMachineSets``): the move does it at once, and this
catches a move whose Node write failed or whose pass died after the machine's patch, so that the
Node's next in-place update is not blocked by a ``selected-for-update`` left behind.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from mcm_tasks.api import MachineDeployment, MachineSet, Obj
from mcm_tasks.api.constants import (
    NODE_LABEL_KEY,
    PRESERVE_ANNOTATION,
    PRESERVE_AUTO_PRESERVED,
    UPDATE_RESULT_LABEL_KEY,
    UPDATE_RESULT_SUCCESSFUL,
)
from mcm_tasks.controllers.common import inplace as ip
from mcm_tasks.controllers.common.rollout import max_unavailable

log = logging.getLogger(__name__)


def _meta(obj: Obj) -> Obj:
    return dict(obj.get("metadata") or {})


def _node_of(machine: Obj) -> str:
    return str((_meta(machine).get("labels") or {}).get(NODE_LABEL_KEY) or "")


# --- pure decisions ---------------------------------------------------------------------------------------


def selection_budget(
    deployment: MachineDeployment,
    all_sets: Sequence[MachineSet],
    new_set: MachineSet,
    undergoing: int,
) -> int:
    """Upstream ``reconcileOldMachineSetsInPlace`` + ``selectNumOfMachineForUpdate``: how many more
    Nodes may be selected now without going below replicas − maxUnavailable."""
    replicas = deployment.spec.replicas
    min_available = replicas - max_unavailable(deployment)
    all_count = sum(ms.spec.replicas for ms in all_sets)
    new_unavailable = new_set.spec.replicas - new_set.status.available_replicas
    if all_count - min_available - new_unavailable - undergoing <= 0:
        return 0
    available = sum(ms.status.available_replicas for ms in all_sets) - undergoing
    if available <= min_available:
        return 0
    return max(0, min(available - min_available, max(replicas - new_set.spec.replicas, 0)))


def stale_preserve_annotations(machine_annotations: dict[str, str]) -> dict[str, None]:
    """Upstream MCM #1137 (second half), as a merge patch: the preserve annotations of a machine
    about to move to the new set that no longer mean anything there. ``auto-preserved`` is the old
    set's own mark of a failure it preserved: the machine was since updated successfully, and the
    new set would count it against its ``autoPreserveFailedMachineMax``. A user's values are kept:
    manual preservation still holds."""
    if machine_annotations.get(PRESERVE_ANNOTATION) == PRESERVE_AUTO_PRESERVED:
        return {PRESERVE_ANNOTATION: None}
    return {}


def node_needs_clearing(node: Obj | None) -> bool:
    """Upstream ``syncMachineSets``' node part: a Node of the new set whose update succeeded (the
    condition and the label both say so) still carries the update labels: clear them, uncordon."""
    return node is not None and ip.update_succeeded(node)


def cleared_node() -> Obj:
    """Upstream ``syncMachineSets``' node part as a merge patch: the update labels and the failure
    reason off a Node whose update succeeded, and the Node schedulable again. (Upstream also adds
    the ``critical-components-not-ready`` taint; we do not: nothing outside Gardener takes it off.)"""
    return {
        "metadata": {
            "labels": {k: None for k in ip.NODE_UPDATE_LABELS},
            "annotations": {ip.UPDATE_FAILED_REASON_ANNOTATION: None},
        },
        "spec": {"unschedulable": False},
    }


def moved_labels(
    machine_labels: dict[str, str], old_set: MachineSet, new_set: MachineSet
) -> dict[str, str | None]:
    """Upstream ``removeLabelsNotCommingFromMachineSet`` as a merge patch: the old set's selector
    labels go, the new set's come, and the in-transfer marker."""
    old_keys = old_set.spec.selector.match_labels if old_set.spec.selector else {}
    new_labels = new_set.spec.selector.match_labels if new_set.spec.selector else {}
    patch: dict[str, str | None] = {k: None for k in old_keys if k not in new_labels and k in machine_labels}
    patch.update(new_labels)
    patch[UPDATE_RESULT_LABEL_KEY] = UPDATE_RESULT_SUCCESSFUL
    return patch


# --- the pass --------------------------------------------------------------------------------------------
