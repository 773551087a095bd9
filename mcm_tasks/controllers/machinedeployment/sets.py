"""A deployment's MachineSets: claiming them, telling the new one from the old ones, keeping the new
one in line with the deployment, creating it, scaling sets and cleaning up old ones.

The new set is the oldest set whose template has the deployment's rollout identity (``hash``); the
others are old. The new set is kept up to date in place on every pass: the deployment's annotations
(except the per-set ones), its revision, minReadySeconds, and the fields that propagate without a
rollout (node template, machine configuration, class kind), which the MachineSet controller then
carries on to its machines. A new set is created as ``<deployment>-<hash[:5]>``; if a different
template already holds that name, collisionCount is bumped and the next pass tries another name.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from mcm_tasks.api import (
    LabelSelector,
    MachineDeployment,
    MachineSet,
    MachineSetSpec,
    NodeTemplateSpec,
    ObjectMeta,
    dump,
    new_controller_ref,
)
from mcm_tasks.api.constants import MACHINE_TEMPLATE_HASH_LABEL_KEY
from mcm_tasks.controllers.common.rollout import max_surge
from mcm_tasks.controllers.common.template import CONFIGURATION_FIELDS, pruned
from mcm_tasks.controllers.machinedeployment.hash import (
    equal_ignore_hash,
    machine_set_name,
    template_hash,
)
from mcm_tasks.controllers.machinedeployment.revisions import (
    max_revision,
    new_set_annotations,
    replicas_annotations,
)
from mcm_tasks.controllers.machinedeployment.scaling import (
    by_age,
    new_set_replicas,
)

log = logging.getLogger(__name__)

SCALING_MACHINE_SET: Final = "ScalingMachineSet"


class HashCollision(RuntimeError):
    """The new set's name is taken by a different template; collisionCount was bumped."""


# --- claiming and sorting --------------------------------------------------------------------------------


def find_new_set(deployment: MachineDeployment, machine_sets: Sequence[MachineSet]) -> MachineSet | None:
    """The oldest set with the deployment's template (ignoring what propagates in place)."""
    for ms in by_age(machine_sets):
        if equal_ignore_hash(ms.spec.template, deployment.spec.template):
            return ms
    return None


def split(
    deployment: MachineDeployment, machine_sets: Sequence[MachineSet]
) -> tuple[MachineSet | None, list[MachineSet]]:
    new = find_new_set(deployment, machine_sets)
    olds = [ms for ms in machine_sets if new is None or ms.metadata.uid != new.metadata.uid]
    return new, olds


# --- the new set in line with the deployment -------------------------------------------------------------


def synced_new_set(deployment: MachineDeployment, new_set: MachineSet, new_revision: int) -> MachineSet:
    """The new set as it should be: annotations and revision, minReadySeconds,
    autoPreserveFailedMachineMax, and the in-place fields of the template (node template, machine
    configuration, class kind) taken from the deployment."""
    want = deployment.spec.template.spec
    spec = new_set.spec.template.spec
    updates: dict[str, object] = {}
    if pruned(_dump_node_template(spec.node_template)) != pruned(_dump_node_template(want.node_template)):
        updates["node_template"] = want.node_template
    for attribute, _ in CONFIGURATION_FIELDS:
        if pruned(getattr(spec, attribute)) != pruned(getattr(want, attribute)):
            updates[attribute] = getattr(want, attribute)
    if spec.class_.kind != want.class_.kind:
        updates["class_"] = spec.class_.model_copy(update={"kind": want.class_.kind})
    template = new_set.spec.template
    if updates:
        template = template.model_copy(update={"spec": spec.model_copy(update=updates)})
    annotations = new_set_annotations(
        new_set.metadata.annotations, deployment.metadata.annotations, new_revision
    )
    return new_set.model_copy(
        update={
            "metadata": new_set.metadata.model_copy(update={"annotations": annotations}),
            "spec": new_set.spec.model_copy(
                update={
                    "template": template,
                    "min_ready_seconds": deployment.spec.min_ready_seconds,
                    # upstream getNewMachineSet keeps it in line too: lowering it on the deployment
                    # is how the new set's auto-preserved machines above it are let go
                    "auto_preserve_failed_machine_max": deployment.spec.auto_preserve_failed_machine_max,
                }
            ),
        }
    )


def _dump_node_template(value: NodeTemplateSpec | None) -> object:
    return None if value is None else dump(value)


# --- creating the new set --------------------------------------------------------------------------------


def new_set_body(deployment: MachineDeployment, old_sets: Sequence[MachineSet]) -> MachineSet:
    """The new set for the deployment's template: hash label on its labels, selector and template;
    the deployment as controller; its annotations, revision and replica annotations; its size."""
    hash_value = template_hash(deployment.spec.template, deployment.status.collision_count)
    labels = {**deployment.spec.template.metadata.labels, MACHINE_TEMPLATE_HASH_LABEL_KEY: hash_value}
    template = deployment.spec.template.model_copy(
        update={"metadata": deployment.spec.template.metadata.model_copy(update={"labels": labels})},
        deep=True,
    )
    selector = deployment.spec.selector or LabelSelector()
    selector = selector.model_copy(
        update={"match_labels": {**selector.match_labels, MACHINE_TEMPLATE_HASH_LABEL_KEY: hash_value}},
        deep=True,
    )
    replicas = deployment.spec.replicas
    annotations = new_set_annotations({}, deployment.metadata.annotations, max_revision(old_sets) + 1)
    annotations.update(replicas_annotations(replicas, replicas + max_surge(deployment)))
    spec = MachineSetSpec(
        replicas=0,
        selector=selector,
        template=template,
        min_ready_seconds=deployment.spec.min_ready_seconds,
    )
    if deployment.spec.auto_preserve_failed_machine_max is not None:
        spec.auto_preserve_failed_machine_max = deployment.spec.auto_preserve_failed_machine_max
    body = MachineSet(
        metadata=ObjectMeta(
            name=machine_set_name(deployment.metadata.name or "", hash_value),
            namespace=deployment.metadata.namespace,
            labels=labels,
            annotations=annotations,
            owner_references=[new_controller_ref(deployment)],
        ),
        spec=spec,
    )
    size = new_set_replicas(deployment, [*old_sets, body], body)
    body.spec.replicas = size
    return body


# --- scaling ---------------------------------------------------------------------------------------------


# --- cleanup and deletion --------------------------------------------------------------------------------


def cleanup_candidates(deployment: MachineDeployment, old_sets: Sequence[MachineSet]) -> list[MachineSet]:
    """revisionHistoryLimit: the oldest old sets beyond the limit that are empty and settled (spec and
    status 0, latest generation observed). No limit, no cleanup."""
    limit = deployment.spec.revision_history_limit
    if limit is None:
        return []
    alive = by_age(ms for ms in old_sets if not ms.metadata.is_deleting)
    excess = len(alive) - limit
    if excess <= 0:
        return []
    return [
        ms
        for ms in alive[:excess]
        if ms.spec.replicas == 0
        and ms.status.replicas == 0
        and (ms.metadata.generation or 0) <= ms.status.observed_generation
    ]
