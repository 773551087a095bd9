"""The steps every path ends with: MCM's sync (scale for a scaling event or a paused deployment),
syncRolloutStatus with the completion actions, and the status-only sync of a deployment being
deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcm_tasks.api import MachineSet
from mcm_tasks.controllers.machinedeployment import sets_io, taints_io
from mcm_tasks.controllers.machinedeployment.progress import (
    NEW_MACHINE_SET_AVAILABLE,
    deadline_check_after,
    is_complete,
    progressing,
    rollout_conditions,
)
from mcm_tasks.controllers.machinedeployment.scaling import desired_annotation_stale, plan_scale
from mcm_tasks.controllers.machinedeployment.scope import Context
from mcm_tasks.controllers.machinedeployment.status import calculate_status


def _all(new_set: MachineSet | None, old_sets: Sequence[MachineSet]) -> list[MachineSet]:
    return [*old_sets, *([new_set] if new_set is not None else [])]


def finish_rollout(
    ctx: Context, new_set: MachineSet | None, old_sets: Sequence[MachineSet], *, complete_actions: bool
) -> float | None:
    """Status with the rollout's progress; with ``complete_actions``, a complete rollout also ends
    the autoscaler protection (on the pass that sees it complete), untaints the new set's nodes and
    cleans up old sets. Seconds until the progress deadline should be checked, if it applies.

    Upstream: ``calculateDeploymentStatus``.
    """
    new_set = sets_io.current(ctx, new_set)
    old_sets = [sets_io.current(ctx, ms) or ms for ms in old_sets]
    all_sets = _all(new_set, old_sets)
    deployment = ctx.deployment
    status = calculate_status(deployment, all_sets, new_set, ctx.now)
    if complete_actions and is_complete(deployment, status):
        previous = progressing(ctx.observed)
        if previous is None or previous.reason != NEW_MACHINE_SET_AVAILABLE:
            # once per completed rollout: it reads every node of the deployment
            taints_io.end_scale_down_protection(ctx, all_sets)
        if new_set is not None:
            taints_io.untaint_set(ctx, new_set)
        sets_io.cleanup(ctx, old_sets)
    status = rollout_conditions(ctx.deployment, ctx.observed, status, new_set, all_sets, ctx.now)
    ctx.write_status(status)
    return deadline_check_after(ctx.deployment, ctx.deployment.status, ctx.now)


def sync(ctx: Context) -> None:
    """Scale proportionally (scaling event, paused deployment); a paused deployment not being rolled
    back also cleans up old sets. Status without progress estimation, as MCM."""
    new_set, old_sets = sets_io.new_and_old(ctx, create=False)
    deployment = ctx.deployment
    sizes = plan_scale(deployment, new_set, old_sets)
    by_name = {ms.metadata.name: ms for ms in ctx.sets}
    for name, size in sizes.items():
        ms = by_name.get(name)
        if ms is not None and (ms.spec.replicas != size or desired_annotation_stale(deployment, ms)):
            sets_io.scale_set(ctx, ms, size)
    if deployment.spec.paused and deployment.spec.rollback_to is None:
        sets_io.cleanup(ctx, old_sets)
    status_only(ctx, new_set, old_sets)


def status_only(ctx: Context, new_set: MachineSet | None, old_sets: Sequence[MachineSet]) -> None:
    """Upstream: ``syncStatusOnly``."""
    new_set = sets_io.current(ctx, new_set)
    old_sets = [sets_io.current(ctx, ms) or ms for ms in old_sets]
    ctx.write_status(calculate_status(ctx.deployment, _all(new_set, old_sets), new_set, ctx.now))
