"""The RollingUpdate strategy's pass: the taints and protection around the step, the step
``rolling.py`` plans applied to the sets, then the rollout's finish.
"""

from __future__ import annotations

from mcm_tasks.controllers.machinedeployment import sets_io, taints, taints_io
from mcm_tasks.controllers.machinedeployment.rolling import plan_rolling
from mcm_tasks.controllers.machinedeployment.scope import Context
from mcm_tasks.controllers.machinedeployment.sync_io import finish_rollout


def rollout_rolling(ctx: Context) -> float | None:
    """One pass of the RollingUpdate strategy; seconds until the next deadline check, if any.

    Upstream: ``rolloutRolling``.
    """
    new_set, old_sets = sets_io.new_and_old(ctx, create=True)
    assert new_set is not None
    running = taints.rollout_running(old_sets)
    taints_io.taint_old_sets(ctx, old_sets, protect=running)
    if running:
        taints_io.protect_from_scale_down(ctx, [*old_sets, new_set])
    old_sets = [sets_io.current(ctx, ms) or ms for ms in old_sets]
    new_set = sets_io.current(ctx, new_set) or new_set

    step = plan_rolling(ctx.deployment, new_set, old_sets)
    if step and sets_io.apply_sizes(ctx, step):
        return finish_rollout(ctx, new_set, old_sets, complete_actions=False)
    return finish_rollout(ctx, new_set, old_sets, complete_actions=True)
