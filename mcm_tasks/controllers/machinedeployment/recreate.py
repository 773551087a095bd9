"""The Recreate strategy: old sets to zero, wait until no old machine exists, then the new set at
full size.

The wait counts machine objects, not just the old sets' statuses: a machine being drained and
deleted still holds its VM and node, and Recreate promises that old and new never run together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from mcm_tasks.api import MachineDeployment, MachineSet
from mcm_tasks.controllers.machinedeployment import sets as machine_sets
from mcm_tasks.controllers.machinedeployment import taints
from mcm_tasks.controllers.machinedeployment.control import Context
from mcm_tasks.controllers.machinedeployment.scaling import Sizes, active
from mcm_tasks.controllers.machinedeployment.sync import finish_rollout


class Step(StrEnum):
    SCALE_DOWN_OLD = "scale-down-old"
    WAIT_FOR_OLD_MACHINES = "wait-for-old-machines"
    CREATE_NEW = "create-new"
    SCALE_NEW = "scale-new"


@dataclass(frozen=True)
class RecreatePlan:
    step: Step
    sizes: Sizes = field(default_factory=dict)


def plan_recreate(
    deployment: MachineDeployment,
    new_set: MachineSet | None,
    old_sets: Sequence[MachineSet],
    old_machines: int,
) -> RecreatePlan:
    """The next step, given how many machine objects the old sets still control."""
    olds = active(old_sets)
    if olds:
        return RecreatePlan(Step.SCALE_DOWN_OLD, {ms.metadata.name or "": 0 for ms in olds})
    if old_machines > 0 or any(ms.status.replicas > 0 for ms in old_sets):
        return RecreatePlan(Step.WAIT_FOR_OLD_MACHINES)
    if new_set is None:
        return RecreatePlan(Step.CREATE_NEW)
    sizes = (
        {}
        if new_set.spec.replicas == deployment.spec.replicas
        else {new_set.metadata.name or "": deployment.spec.replicas}
    )
    return RecreatePlan(Step.SCALE_NEW, sizes)


def rollout_recreate(ctx: Context) -> float | None:
    """Upstream: ``rolloutRecreate``."""
    new_set, old_sets = machine_sets.new_and_old(ctx, create=False)
    if taints.rollout_running(old_sets):
        taints.protect_from_scale_down(ctx, [*old_sets, *([new_set] if new_set else [])])
    old_machines = sum(len(ctx.machines_of(ms)) for ms in old_sets)
    plan = plan_recreate(ctx.deployment, new_set, old_sets, old_machines)
    if plan.step in (Step.SCALE_DOWN_OLD, Step.WAIT_FOR_OLD_MACHINES):
        machine_sets.apply_sizes(ctx, plan.sizes)
        return finish_rollout(ctx, new_set, old_sets, complete_actions=False)
    if plan.step is Step.CREATE_NEW:
        new_set = machine_sets.create_new_set(ctx, old_sets)
    else:
        machine_sets.apply_sizes(ctx, plan.sizes)
    return finish_rollout(ctx, new_set, old_sets, complete_actions=True)
