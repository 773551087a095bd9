"""The MachineDeployment reconcile (MCM's reconcileClusterMachineDeployment), on the queue contract.

Order: read the deployment (from the API server); gone → done; being deleted → delete all the sets
it controls and drop the finalizer once none is left; invalid → skipped with a Warning event; add
the finalizer; an empty selector → a SelectingAll Warning and nothing else; claim the MachineSets;
put the machine-template-hash label on adopted sets (a set not yet through holds the pass);
the paused/resumed condition; the autoscaler's trigger-deletion annotation; then exactly one
of: a paused deployment (scale only), a rollback, a scaling event (proportional scaling), or the
strategy (Recreate, RollingUpdate, or InPlaceUpdate: ``inplace.rollout_in_place``). Each ends
with the status, written only when it changed.

Deliberate difference: MCM validates and checks the selector before it looks at a deletion, so an
invalid or select-all deployment, once deleted, keeps its finalizer forever; here deletion comes
first and only needs the sets the deployment already controls.

A pass decides on cached MachineSets and writes with their resourceVersions; when a write meets a
Conflict (the mirror lagged), the pass runs once more on live reads; while the mirror lags
(``lagging_io.mirror_lagging``) it reads live from the start, and the sets it writes are woken at
once (``scope.Context.update_set``). The deployment comes back
after ShortRetry while a rollout is under way (besides the informer's events for its sets),
after LongRetry once it is complete, and in time to notice a missed progress deadline.
"""

from __future__ import annotations

import logging
from typing import Final

from mcm_tasks.api import MachineDeploymentStrategyType
from mcm_tasks.api.constants import MCM_FINALIZER
from mcm_tasks.api.enums import ConditionStatus
from mcm_tasks.api.validation import validate_machine_deployment
from mcm_tasks.cache.layout import split_key
from mcm_tasks.controllers.common.lagging_io import mirror_lagging
from mcm_tasks.controllers.machinedeployment import progress, sets_io
from mcm_tasks.controllers.machinedeployment import sets as machine_sets
from mcm_tasks.controllers.machinedeployment.inplace_io import rollout_in_place
from mcm_tasks.controllers.machinedeployment.recreate_io import rollout_recreate
from mcm_tasks.controllers.machinedeployment.rollback_io import rollback
from mcm_tasks.controllers.machinedeployment.rolling_io import rollout_rolling
from mcm_tasks.controllers.machinedeployment.scaling import is_scaling_event
from mcm_tasks.controllers.machinedeployment.scope import Context
from mcm_tasks.controllers.machinedeployment.sync_io import status_only, sync
from mcm_tasks.controllers.machinedeployment.trigger_io import handle_trigger_deletion
from mcm_tasks.controllers.problems_io import answers_unreadable
from mcm_tasks.kube.errors import describe, is_conflict
from mcm_tasks.kube.events import WARNING
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import get_settings

log = logging.getLogger(__name__)

INVALID_REASON: Final = "ValidationFailed"
SELECTING_ALL_REASON: Final = "SelectingAll"
SELECTING_ALL_MESSAGE: Final = "This deployment is selecting all machines. A non-empty selector is required."


@answers_unreadable
def reconcile_machine_deployment(key: str) -> Requeue | None:
    settings = get_settings()
    namespace, name = split_key(key)
    namespace = namespace or settings.namespace
    # while the mirror lags (issue 29) the sets' latest status is not in it yet: live reads at once
    for live in (True,) if mirror_lagging(settings) else (False, True):
        try:
            return reconcile_once(namespace, name, live=live)
        except machine_sets.HashCollision:
            return Requeue.conflict()
        except Exception as err:
            if not is_conflict(err):
                raise
            log.info("MachineDeployment %s: %s; deciding again on live reads", key, describe(err))
    return Requeue.conflict()


def reconcile_once(namespace: str, name: str, *, live: bool) -> Requeue | None:
    """One attempt: the deployment read (``live``: from the API server), its ``Context`` built around
    it, then ``deployment_pass``."""
    deployment = Context.read(namespace, name)
    if deployment is None:
        return None
    return deployment_pass(Context.start(deployment, live=live))


def deployment_pass(ctx: Context) -> Requeue | None:
    """One pass of upstream ``reconcileClusterMachineDeployment`` over the deployment its scope read."""
    deployment = ctx.deployment
    deleting = deployment.metadata.is_deleting
    if deleting:
        # deletion needs neither a valid spec nor a selector: only the sets the deployment controls
        sets_io.claim_sets(ctx)
        return _delete(ctx)

    problems = validate_machine_deployment(deployment)
    if problems:
        message = "; ".join(str(p) for p in problems)
        log.warning("MachineDeployment %s is invalid, skipped: %s", ctx.key, message)
        ctx.event(WARNING, INVALID_REASON, message)
        # said on the status too (cleared by the first valid pass, which recomputes ReplicaFailure)
        invalid = progress.condition(
            progress.REPLICA_FAILURE, ConditionStatus.TRUE, INVALID_REASON, message, ctx.now
        )
        ctx.write_status(progress.with_condition(ctx.deployment.status, invalid))
        return None

    ctx.set_finalizer(True)
    selector = ctx.deployment.spec.selector
    if selector is None or selector.is_empty:
        ctx.event(WARNING, SELECTING_ALL_REASON, SELECTING_ALL_MESSAGE)
        generation = ctx.deployment.metadata.generation or 0
        if ctx.deployment.status.observed_generation < generation:
            ctx.write_status(ctx.deployment.status.model_copy(update={"observed_generation": generation}))
        return None

    sets_io.claim_sets(ctx)
    if not sets_io.sync_hash_keys(ctx):
        return Requeue.short()
    paused = progress.paused_condition(ctx.deployment, ctx.now)
    if paused is not None:
        ctx.deployment.status = progress.with_condition(ctx.deployment.status, paused)
    handle_trigger_deletion(ctx)

    spec = ctx.deployment.spec
    if spec.paused:
        sync(ctx)
        return Requeue.long()
    if spec.rollback_to is not None:
        rollback(ctx)
        ctx.write_status()
        return Requeue.short()

    new_set, old_sets = machine_sets.split(ctx.deployment, ctx.sets)
    if is_scaling_event(ctx.deployment, new_set, old_sets):
        log.info("MachineDeployment %s: scaling event (replicas %d)", ctx.key, spec.replicas)
        sync(ctx)
        return Requeue.short()

    if spec.strategy.type == MachineDeploymentStrategyType.RECREATE:
        deadline = rollout_recreate(ctx)
    elif spec.strategy.type == MachineDeploymentStrategyType.IN_PLACE_UPDATE:
        deadline = rollout_in_place(ctx)
    else:
        deadline = rollout_rolling(ctx)
    return _next_pass(ctx, deadline)


def _delete(ctx: Context) -> Requeue | None:
    """Delete every set; drop the finalizer once none is left (their machines go with them)."""
    if not ctx.deployment.metadata.has_finalizer(MCM_FINALIZER):
        return None
    if not ctx.sets:
        ctx.set_finalizer(False)
        log.info("MachineDeployment %s: all machine sets gone, finalizer removed", ctx.key)
        return None
    sets_io.delete_all_sets(ctx)
    if not validate_machine_deployment(ctx.deployment):
        new_set, old_sets = machine_sets.split(ctx.deployment, ctx.sets)
        status_only(ctx, new_set, old_sets)
    return Requeue.short()


def _next_pass(ctx: Context, deadline: float | None) -> Requeue:
    complete = progress.is_complete(ctx.deployment, ctx.deployment.status)
    after = ctx.settings.long_retry if complete else ctx.settings.short_retry
    if deadline is not None:
        after = min(after, deadline)
    return Requeue(after=after)
