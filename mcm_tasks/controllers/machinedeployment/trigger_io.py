"""The cluster-autoscaler's ``trigger-deletion-by-mcm`` annotation, acted on: the chosen machines
marked, the annotation rewritten, the scaler's time copied to their sets; ``trigger.py`` parses it
and decides the plan.
"""

from __future__ import annotations

import logging

from mcm_tasks import kinds
from mcm_tasks.api import format_time
from mcm_tasks.api.constants import (
    LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION,
    TRIGGER_DELETION_BY_MCM_ANNOTATION,
)
from mcm_tasks.controllers.machinedeployment.scope import Context
from mcm_tasks.controllers.machinedeployment.trigger import (
    TriggerPlan,
    controller_uid,
    parse_entries,
    plan_trigger,
)
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import is_not_found

log = logging.getLogger(__name__)


def handle_trigger_deletion(ctx: Context) -> None:
    annotations = ctx.deployment.metadata.annotations
    current_value = annotations.get(TRIGGER_DELETION_BY_MCM_ANNOTATION)
    if current_value is None:
        return
    scaler_time = annotations.get(LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION) or format_time(ctx.now)
    entries = parse_entries(current_value, scaler_time)
    machines = {e.machine: ctx.get_machine(e.machine) for e in entries}
    set_uids = {ms.metadata.uid or "" for ms in ctx.sets}
    plan = plan_trigger(current_value, entries, machines, set_uids)
    if plan.annotation is not None:
        log.info("MachineDeployment %s: trigger-deletion entries now %r (was %r)",
                 ctx.key, plan.annotation, current_value)  # fmt: skip
        ctx.patch_deployment(
            {"metadata": {"annotations": {TRIGGER_DELETION_BY_MCM_ANNOTATION: plan.annotation or None}}}
        )
    for name, wanted in plan.machine_patches.items():
        try:
            ops.patch(
                ctx.api, kinds.MACHINE.resource, name, {"metadata": {"annotations": wanted}}, ctx.namespace
            )
        except Exception as err:
            if not is_not_found(err):
                raise
            continue
        log.info("MachineDeployment %s: machine %s marked for deletion (%s)", ctx.key, name, wanted)
    _copy_scaler_time(ctx, plan)


def _copy_scaler_time(ctx: Context, plan: TriggerPlan) -> None:
    """The sets holding marked machines learn the deployment's last scaler change."""
    scaler_time = ctx.deployment.metadata.annotations.get(LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION)
    if not scaler_time:
        return
    holders = {controller_uid(machine) for _, machine in plan.kept}
    for ms in list(ctx.sets):
        if ms.metadata.uid not in holders:
            continue
        if ms.metadata.annotations.get(LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION) == scaler_time:
            continue
        annotations = {**ms.metadata.annotations, LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION: scaler_time}
        ctx.update_set(
            ms,
            ms.model_copy(update={"metadata": ms.metadata.model_copy(update={"annotations": annotations})}),
        )
