"""Rollback (``spec.rollbackTo``), carried out: the revision's set untainted, the deployment
written with its template, the Event; ``rollback.py`` plans it.
"""

from __future__ import annotations

import logging

from mcm_tasks.controllers.machinedeployment import sets_io, taints_io
from mcm_tasks.controllers.machinedeployment.rollback import (
    ROLLBACK_DONE,
    ROLLBACK_REVISION_NOT_FOUND,
    ROLLBACK_TEMPLATE_UNCHANGED,
    plan_rollback,
    rolled_back,
)
from mcm_tasks.controllers.machinedeployment.scope import Context
from mcm_tasks.kube.events import NORMAL, WARNING

log = logging.getLogger(__name__)


def rollback(ctx: Context) -> None:
    """Upstream: ``rollbackToTemplate``."""
    new_set, old_sets = sets_io.new_and_old(ctx, create=False)
    all_sets = [*old_sets, *([new_set] if new_set is not None else [])]
    plan = plan_rollback(ctx.deployment, all_sets)
    name = ctx.deployment.metadata.name
    if plan.target is None:
        ctx.event(WARNING, ROLLBACK_REVISION_NOT_FOUND, plan.problem)
    else:
        taints_io.untaint_set(ctx, sets_io.current(ctx, plan.target) or plan.target)
        if not plan.changes_template:
            ctx.event(
                WARNING,
                ROLLBACK_TEMPLATE_UNCHANGED,
                f'The rollback revision contains the same template as current deployment "{name}"',
            )
    ctx.update_deployment(rolled_back(ctx.deployment, plan.target, take_template=plan.changes_template))
    if plan.target is not None and plan.changes_template:
        log.info("MachineDeployment %s: rolled back to revision %d", ctx.key, plan.revision)
        ctx.event(NORMAL, ROLLBACK_DONE, f'Rolled back deployment "{name}" to revision {plan.revision}')
