"""A deployment's MachineSets, acted on: claiming them, keeping the new one in line with the
deployment, creating it, scaling sets and cleaning up old ones, through the pass's ``Context``.
``sets.py`` decides which set is new, its body and which old sets go.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from mcm_tasks import kinds
from mcm_tasks.api import (
    ConditionStatus,
    LabelSelector,
    Machine,
    MachineSet,
)
from mcm_tasks.api.constants import MACHINE_TEMPLATE_HASH_LABEL_KEY, REVISION_ANNOTATION
from mcm_tasks.controllers.common.claim_io import claim_children, recheck_owner
from mcm_tasks.controllers.common.rollout import max_surge
from mcm_tasks.controllers.machinedeployment import progress
from mcm_tasks.controllers.machinedeployment.hash import (
    HashKeyStep,
    equal_ignore_hash,
    has_hash_key,
    hash_key_step,
    is_machine_active,
    template_hash,
)
from mcm_tasks.controllers.machinedeployment.revisions import (
    max_revision,
    replicas_annotations,
)
from mcm_tasks.controllers.machinedeployment.scaling import (
    Sizes,
)
from mcm_tasks.controllers.machinedeployment.scope import Context
from mcm_tasks.controllers.machinedeployment.sets import (
    SCALING_MACHINE_SET,
    HashCollision,
    cleanup_candidates,
    new_set_body,
    split,
    synced_new_set,
)
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe, is_already_exists
from mcm_tasks.kube.events import NORMAL, WARNING

log = logging.getLogger(__name__)


def claim_sets(ctx: Context) -> list[MachineSet]:
    """Adopt selected orphan sets, release controlled sets no longer selected; the controlled ones.

    Upstream: ``getMachineSetsForMachineDeployment``.
    """
    deployment = ctx.deployment
    outcome = claim_children(
        ctx.api, kinds.MACHINE_SET.resource, MachineSet, deployment, deployment.spec.selector,
        ctx.candidate_sets(),
        recheck_owner(ctx.api, kinds.MACHINE_DEPLOYMENT.resource, deployment),
    )  # fmt: skip
    if outcome.adopted or outcome.released:
        log.info(
            "MachineDeployment %s: adopted sets %s, released %s", ctx.key, outcome.adopted, outcome.released
        )
    if outcome.errors:
        raise outcome.errors[0]
    ctx.sets = outcome.claimed
    return ctx.sets


def sync_hash_keys(ctx: Context) -> bool:
    """Put the ``machine-template-hash`` label on every set the deployment controls that lacks it in
    its selector (adopted sets: the deployment makes its own with it), one step per set and pass
    (``hash.hash_key_step``); whether every set is through. A set that is not holds the pass: its
    selector would overlap the new set's, and the next pass (the set's status, its machines' labels
    or the requeue wakes it) takes the next step.

    Upstream: ``getAllMachineSetsAndSyncRevision`` → ``isAndMachinesWithHashKeySynced``,
    ``addHashKeyToISAndMachines``, ``LabelMachinesWithHash``.
    """
    key = MACHINE_TEMPLATE_HASH_LABEL_KEY
    through = True
    for ms in list(ctx.sets):
        if has_hash_key(ms):  # every set once through: its machines are not read
            continue
        hash_value = template_hash(ms.spec.template, ctx.deployment.status.collision_count)
        machines = [Machine.model_validate(m) for m in ctx.machines_of(ms)]
        step = hash_key_step(ms, machines, hash_value)
        if step is HashKeyStep.DONE:
            continue
        through = False
        log.info("MachineDeployment %s: set %s, machine-template-hash %s: %s", ctx.key, ms.metadata.name,
                 hash_value, step.value)  # fmt: skip
        if step is HashKeyStep.LABEL_TEMPLATE:
            template = ms.spec.template
            labels = {**template.metadata.labels, key: hash_value}
            meta = template.metadata.model_copy(update={"labels": labels})
            desired = ms.spec.model_copy(update={"template": template.model_copy(update={"metadata": meta})})
            ctx.update_set(ms, ms.model_copy(update={"spec": desired}))
        elif step is HashKeyStep.LABEL_MACHINES:
            for machine in machines:
                if is_machine_active(machine) and machine.metadata.labels.get(key) != hash_value:
                    body = {"metadata": {"labels": {key: hash_value},
                                         "resourceVersion": machine.metadata.resource_version}}  # fmt: skip
                    ops.patch(ctx.api, kinds.MACHINE.resource, machine.metadata.name or "", body,
                              machine.metadata.namespace)  # fmt: skip
        elif step is HashKeyStep.LABEL_SELECTOR:
            selector = ms.spec.selector or LabelSelector()
            selector = selector.model_copy(
                update={"match_labels": {**selector.match_labels, key: hash_value}}
            )
            meta = ms.metadata.model_copy(update={"labels": {**ms.metadata.labels, key: hash_value}})
            ctx.update_set(
                ms,
                ms.model_copy(
                    update={"metadata": meta, "spec": ms.spec.model_copy(update={"selector": selector})}
                ),
            )
    return through


def sync_revision(ctx: Context, new_set: MachineSet, old_sets: Sequence[MachineSet]) -> MachineSet:
    """Bring an existing new set in line, then record its revision on the deployment (and, when the
    rollout has no Progressing condition yet, that the new set was found).

    Upstream: ``getNewMachineSet``.
    """
    desired = synced_new_set(ctx.deployment, new_set, max_revision(old_sets) + 1)
    new_set = ctx.update_set(new_set, desired)
    revision = new_set.metadata.annotations.get(REVISION_ANNOTATION)
    if revision is not None and ctx.deployment.metadata.annotations.get(REVISION_ANNOTATION) != revision:
        ctx.patch_deployment({"metadata": {"annotations": {REVISION_ANNOTATION: revision}}}, guarded=False)
    if progress.progressing(ctx.deployment.status) is None:
        ctx.deployment.status = progress.with_condition(
            ctx.deployment.status,
            progress.condition(progress.PROGRESSING, ConditionStatus.TRUE, progress.FOUND_NEW_MACHINE_SET,
                               f'Found new machine set "{new_set.metadata.name}"', ctx.now),
        )  # fmt: skip
    return new_set


def new_and_old(ctx: Context, *, create: bool) -> tuple[MachineSet | None, list[MachineSet]]:
    """MCM's getAllMachineSetsAndSyncRevision: the new set (synced; created when ``create`` and
    missing) and the old sets."""
    new_set, old_sets = split(ctx.deployment, ctx.sets)
    if new_set is not None:
        return sync_revision(ctx, new_set, old_sets), old_sets
    if not create:
        return None, old_sets
    return create_new_set(ctx, old_sets), old_sets


def create_new_set(ctx: Context, old_sets: Sequence[MachineSet]) -> MachineSet:
    deployment = ctx.deployment
    body = new_set_body(deployment, old_sets)
    name = body.metadata.name or ""
    try:
        created = ctx.create_set(body)
    except Exception as err:
        if is_already_exists(err):
            return _existing_new_set(ctx, body)
        message = f'Failed to create new machine set "{name}": {describe(err)}'
        ctx.deployment.status = progress.with_condition(
            ctx.deployment.status,
            progress.condition(progress.PROGRESSING, ConditionStatus.FALSE, progress.MACHINE_SET_CREATE_ERROR,
                               message, ctx.now),
        )  # fmt: skip
        ctx.write_status()
        ctx.event(WARNING, progress.MACHINE_SET_CREATE_ERROR, message)
        raise
    log.info(
        "MachineDeployment %s: created MachineSet %s with %d replicas", ctx.key, name, created.spec.replicas
    )
    if created.spec.replicas > 0:
        ctx.event(NORMAL, SCALING_MACHINE_SET, f"Scaled up machine set {name} to {created.spec.replicas}")
    revision = created.metadata.annotations.get(REVISION_ANNOTATION, "")
    if ctx.deployment.metadata.annotations.get(REVISION_ANNOTATION) != revision:
        ctx.patch_deployment({"metadata": {"annotations": {REVISION_ANNOTATION: revision}}}, guarded=False)
    ctx.deployment.status = progress.with_condition(
        ctx.deployment.status,
        progress.condition(progress.PROGRESSING, ConditionStatus.TRUE, progress.NEW_MACHINE_SET_CREATED,
                           f'Created new machine set "{name}"', ctx.now),
    )  # fmt: skip
    return created


def _existing_new_set(ctx: Context, body: MachineSet) -> MachineSet:
    """The name is taken: ours when it has the deployment's template (a lagging cache), otherwise a
    hash collision, resolved by bumping collisionCount (the next pass computes another name)."""
    existing = ctx.read_set(body.metadata.name or "")
    if existing is not None and equal_ignore_hash(existing.spec.template, ctx.deployment.spec.template):
        if all(ms.metadata.uid != existing.metadata.uid for ms in ctx.sets):
            ctx.sets = [*ctx.sets, existing]
        return existing
    count = (ctx.deployment.status.collision_count or 0) + 1
    ctx.deployment.status = ctx.deployment.status.model_copy(update={"collision_count": count})
    ctx.write_status()
    log.info(
        "MachineDeployment %s: hash collision on %s, collisionCount now %d",
        ctx.key,
        body.metadata.name,
        count,
    )
    raise HashCollision(f"machine set {body.metadata.name} exists with another template")


def scale_set(ctx: Context, machine_set: MachineSet, size: int) -> bool:
    """Set a set's replicas and its desired/max-replicas annotations; whether its size changed.

    Upstream: ``scaleMachineSet``, ``scaleMachineSetAndRecordEvent``.
    """
    deployment = ctx.deployment
    annotations = {
        **machine_set.metadata.annotations,
        **replicas_annotations(deployment.spec.replicas, deployment.spec.replicas + max_surge(deployment)),
    }
    desired = machine_set.model_copy(
        update={
            "metadata": machine_set.metadata.model_copy(update={"annotations": annotations}),
            "spec": machine_set.spec.model_copy(update={"replicas": size}),
        }
    )
    before = machine_set.spec.replicas
    written = ctx.update_set(machine_set, desired)
    if before == size:
        return False
    direction = "up" if size > before else "down"
    log.info("MachineDeployment %s: scaled %s MachineSet %s %d → %d",
             ctx.key, direction, written.metadata.name, before, size)  # fmt: skip
    ctx.event(
        NORMAL, SCALING_MACHINE_SET, f"Scaled {direction} machine set {written.metadata.name} to {size}"
    )
    return True


def apply_sizes(ctx: Context, sizes: Sizes) -> bool:
    """Write each size (in order); whether any set changed size. Stops at the first error."""
    by_name = {ms.metadata.name: ms for ms in ctx.sets}
    scaled = False
    for name, size in sizes.items():
        machine_set = by_name.get(name)
        if machine_set is None:
            continue
        scaled = scale_set(ctx, machine_set, size) or scaled
    return scaled


def current(ctx: Context, machine_set: MachineSet | None) -> MachineSet | None:
    """A set as last written in this pass."""
    if machine_set is None:
        return None
    return next((ms for ms in ctx.sets if ms.metadata.uid == machine_set.metadata.uid), machine_set)


def cleanup(ctx: Context, old_sets: Sequence[MachineSet]) -> None:
    """Upstream: ``cleanupMachineDeployment``."""
    for ms in cleanup_candidates(ctx.deployment, old_sets):
        log.info("MachineDeployment %s: deleting old MachineSet %s (revision history limit %s)",
                 ctx.key, ms.metadata.name, ctx.deployment.spec.revision_history_limit)  # fmt: skip
        # stop at the first failure: the API server may be overloaded
        ctx.delete_set(ms)


def delete_all_sets(ctx: Context) -> None:
    for ms in ctx.sets:
        if not ms.metadata.is_deleting:
            ctx.delete_set(ms)
