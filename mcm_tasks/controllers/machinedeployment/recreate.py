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
from mcm_tasks.controllers.machinedeployment.scaling import Sizes, active


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
