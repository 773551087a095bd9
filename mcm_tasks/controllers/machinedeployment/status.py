"""The deployment's status computed from its MachineSets (pure).

replicas = machines of all sets (their status.replicas); updatedReplicas = the new set's;
ready / available = sums; unavailable = max(Σ spec.replicas − available, 0), as MCM computes it;
failedMachines = the union of the sets' lists; collisionCount kept; observedGeneration = the
generation this pass acted on; Available True (MinimumReplicasAvailable) iff available ≥ replicas −
maxUnavailable. The other conditions are carried over (``progress`` adds to them).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from mcm_tasks.api import ConditionStatus, MachineDeployment, MachineDeploymentStatus, MachineSet
from mcm_tasks.controllers.common.rollout import max_unavailable
from mcm_tasks.controllers.machinedeployment.progress import (
    AVAILABLE,
    MINIMUM_REPLICAS_AVAILABLE,
    MINIMUM_REPLICAS_UNAVAILABLE,
    condition,
    with_condition,
)


def calculate_status(
    deployment: MachineDeployment, all_sets: Sequence[MachineSet], new_set: MachineSet | None, now: datetime
) -> MachineDeploymentStatus:
    current = deployment.status
    available = sum(ms.status.available_replicas for ms in all_sets)
    desired = sum(ms.spec.replicas for ms in all_sets)
    status = current.model_copy(
        update={
            "observed_generation": deployment.metadata.generation or current.observed_generation,
            "replicas": sum(ms.status.replicas for ms in all_sets),
            "updated_replicas": new_set.status.replicas if new_set is not None else 0,
            "ready_replicas": sum(ms.status.ready_replicas for ms in all_sets),
            "available_replicas": available,
            "unavailable_replicas": max(desired - available, 0),
            "preserved_failed_replicas": sum(ms.status.preserved_failed_replicas for ms in all_sets),
            "failed_machines": [summary for ms in all_sets for summary in ms.status.failed_machines],
            "conditions": list(current.conditions),
        }
    )
    if available >= deployment.spec.replicas - max_unavailable(deployment):
        cond = condition(
            AVAILABLE,
            ConditionStatus.TRUE,
            MINIMUM_REPLICAS_AVAILABLE,
            "Deployment has minimum availability.",
            now,
        )
    else:
        cond = condition(
            AVAILABLE,
            ConditionStatus.FALSE,
            MINIMUM_REPLICAS_UNAVAILABLE,
            "Deployment does not have minimum availability.",
            now,
        )
    return with_condition(status, cond)


def status_key(status: MachineDeploymentStatus) -> tuple[object, ...]:
    """What this controller manages in a status, for "did it change" (absent and zero are equal).

    Conditions and failed machines compare as models (their fields and unknown keys, not whether a
    zero was written): as exact as their dumps, which cost a MachineDeployment pass more than its
    decisions (two status keys per status write, a dump per condition each)."""
    return (
        status.observed_generation,
        status.replicas,
        status.updated_replicas,
        status.ready_replicas,
        status.available_replicas,
        status.unavailable_replicas,
        status.preserved_failed_replicas,
        status.collision_count,
        tuple(status.conditions),
        tuple(status.failed_machines),
    )
