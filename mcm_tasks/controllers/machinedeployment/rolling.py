"""The RollingUpdate strategy: grow the new set within the surge budget, shrink old sets within the
availability budget, one kind of step per pass.

Each pass either scales the new set (up to what replicas + maxSurge leaves, or down to replicas) or,
when the new set cannot grow, scales old sets down: first by their unavailable machines (oldest set
first; losing those costs no availability), then by the available machines above replicas −
maxUnavailable (oldest first), never more than all desired machines − the minimum available − the
new set's not-yet-available ones. Then the status; the next pass comes when a set's status changes.
Around the steps: old sets' nodes get the PreferNoSchedule taint, all nodes the autoscaler's
scale-down protection while old machines remain; when the rollout is complete the protection and the
new set's taint (if it was once old) come off and old sets beyond revisionHistoryLimit are deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcm_tasks.api import MachineDeployment, MachineSet
from mcm_tasks.controllers.machinedeployment.scaling import (
    Sizes,
    active,
    changed,
    cleanup_unhealthy,
    max_scaled_down,
    new_set_replicas,
    scale_down_old,
    with_sizes,
)


def plan_new_set(deployment: MachineDeployment, all_sets: Sequence[MachineSet], new_set: MachineSet) -> Sizes:
    """The new set's next size: down to replicas if above, else as far up as the surge allows.

    Upstream: ``reconcileNewMachineSet``.
    """
    replicas = deployment.spec.replicas
    if new_set.spec.replicas == replicas:
        return {}
    if new_set.spec.replicas > replicas:
        return {new_set.metadata.name or "": replicas}
    size = new_set_replicas(deployment, all_sets, new_set)
    return {} if size == new_set.spec.replicas else {new_set.metadata.name or "": size}


def plan_old_sets(
    deployment: MachineDeployment, all_sets: Sequence[MachineSet], new_set: MachineSet
) -> Sizes:
    """The old sets' next sizes (only those that change).

    Upstream: ``reconcileOldMachineSets``.
    """
    olds = active(ms for ms in all_sets if ms.metadata.uid != new_set.metadata.uid)
    if sum(ms.spec.replicas for ms in olds) == 0:
        return {}
    budget = max_scaled_down(deployment, all_sets, new_set)
    if budget <= 0:
        return {}
    unhealthy = cleanup_unhealthy(olds, budget)
    olds_after = with_sizes(olds, unhealthy)
    surplus = scale_down_old(deployment, [*olds_after, new_set], olds_after)
    return changed(olds, {**unhealthy, **surplus})


def plan_rolling(deployment: MachineDeployment, new_set: MachineSet, old_sets: Sequence[MachineSet]) -> Sizes:
    """This pass's step: the new set's resize if there is one, else the old sets' scale-down."""
    all_sets = [*old_sets, new_set]
    return plan_new_set(deployment, all_sets, new_set) or plan_old_sets(deployment, all_sets, new_set)
