"""Rollback (``spec.rollbackTo``): put the template of an earlier revision back into the deployment.

Revision 0 means the previous one (the second highest). The set of that revision gets its nodes'
PreferNoSchedule taint removed (its machines are about to be the new ones), its template (without
the hash label) and annotations are copied into the deployment, and rollbackTo is cleared in the same
write; the ordinary rollout then makes that set the new one again. Events: DeploymentRollback when
the template changed, DeploymentRollbackTemplateUnchanged when it already was that revision's,
DeploymentRollbackRevisionNotFound when there is no such revision (rollbackTo is cleared anyway).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from mcm_tasks.api import MachineDeployment, MachineSet
from mcm_tasks.api.constants import MACHINE_TEMPLATE_HASH_LABEL_KEY
from mcm_tasks.controllers.machinedeployment.hash import equal_ignore_hash
from mcm_tasks.controllers.machinedeployment.revisions import (
    last_revision,
    revision_of,
    rolled_back_annotations,
)

log = logging.getLogger(__name__)

ROLLBACK_DONE: Final = "DeploymentRollback"
ROLLBACK_REVISION_NOT_FOUND: Final = "DeploymentRollbackRevisionNotFound"
ROLLBACK_TEMPLATE_UNCHANGED: Final = "DeploymentRollbackTemplateUnchanged"


@dataclass(frozen=True)
class RollbackPlan:
    #: the set to roll back to; None when the revision was not found
    target: MachineSet | None
    revision: int
    #: whether the deployment's template differs from the target's (a real rollback)
    changes_template: bool
    #: the event to record when nothing is rolled back
    problem: str = ""


def plan_rollback(deployment: MachineDeployment, all_sets: Sequence[MachineSet]) -> RollbackPlan:
    wanted = deployment.spec.rollback_to.revision if deployment.spec.rollback_to is not None else 0
    if wanted == 0:
        wanted = last_revision(all_sets)
        if wanted == 0:
            return RollbackPlan(None, 0, False, "Unable to find last revision.")
    for ms in all_sets:
        if revision_of(ms.metadata.annotations) == wanted:
            same = equal_ignore_hash(deployment.spec.template, ms.spec.template)
            return RollbackPlan(ms, wanted, not same)
    return RollbackPlan(None, wanted, False, "Unable to find the revision to rollback to.")


def rolled_back(
    deployment: MachineDeployment, target: MachineSet | None, *, take_template: bool
) -> MachineDeployment:
    """The deployment after the rollback: rollbackTo cleared and, with ``take_template``, the target
    set's template (minus the hash label) and annotations."""
    spec_update: dict[str, object] = {"rollback_to": None}
    metadata = deployment.metadata
    if target is not None and take_template:
        template = target.spec.template.model_copy(deep=True)
        labels = {k: v for k, v in template.metadata.labels.items() if k != MACHINE_TEMPLATE_HASH_LABEL_KEY}
        spec_update["template"] = template.model_copy(
            update={"metadata": template.metadata.model_copy(update={"labels": labels})}
        )
        annotations = rolled_back_annotations(metadata.annotations, target.metadata.annotations)
        metadata = metadata.model_copy(update={"annotations": annotations})
    return deployment.model_copy(
        update={"metadata": metadata, "spec": deployment.spec.model_copy(update=spec_update)}
    )
