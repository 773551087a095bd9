"""The Recreate strategy's pass: the old machines counted, the step ``recreate.py`` plans applied
(the new set created once no old machine is left), then the rollout's finish.
"""

from __future__ import annotations

from mcm_tasks.controllers.machinedeployment import sets_io, taints, taints_io
from mcm_tasks.controllers.machinedeployment.recreate import Step, plan_recreate
from mcm_tasks.controllers.machinedeployment.scope import Context
from mcm_tasks.controllers.machinedeployment.sync_io import finish_rollout


def rollout_recreate(ctx: Context) -> float | None:
    """Upstream: ``rolloutRecreate``."""
    new_set, old_sets = sets_io.new_and_old(ctx, create=False)
    if taints.rollout_running(old_sets):
        taints_io.protect_from_scale_down(ctx, [*old_sets, *([new_set] if new_set else [])])
    old_machines = sum(len(ctx.machines_of(ms)) for ms in old_sets)
    plan = plan_recreate(ctx.deployment, new_set, old_sets, old_machines)
    if plan.step in (Step.SCALE_DOWN_OLD, Step.WAIT_FOR_OLD_MACHINES):
        sets_io.apply_sizes(ctx, plan.sizes)
        return finish_rollout(ctx, new_set, old_sets, complete_actions=False)
    if plan.step is Step.CREATE_NEW:
        new_set = sets_io.create_new_set(ctx, old_sets)
    else:
        sets_io.apply_sizes(ctx, plan.sizes)
    return finish_rollout(ctx, new_set, old_sets, complete_actions=True)
