"""The deployment's conditions (pure): Available, Progressing with MCM's reasons, ReplicaFailure
copied from its sets, and the progress deadline.

Progressing tells where a rollout is: NewMachineSetCreated / FoundNewMachineSet when the pass found
or made the new set, MachineSetUpdated each time it sees progress (its lastUpdateTime is the
deadline's base), NewMachineSetAvailable once complete, ProgressDeadlineExceeded (False) when no
progress was seen for progressDeadlineSeconds, MachineSetCreateError (False) when the new set cannot
be created; Unknown DeploymentPaused / DeploymentResumed around a pause, so that a long pause is not
mistaken for a stalled rollout. Deliberate difference: MCM sets the created/found/paused reasons only
when progressDeadlineSeconds is set; here they are always set, so every deployment shows where its
rollout is (the deadline itself still applies only when set).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

from mcm_tasks.api import (
    ConditionStatus,
    MachineDeployment,
    MachineDeploymentCondition,
    MachineDeploymentConditionType,
    MachineDeploymentStatus,
    MachineSet,
    MachineSetConditionType,
    get_condition,
    remove_condition,
    set_condition,
)

AVAILABLE: Final = MachineDeploymentConditionType.AVAILABLE
PROGRESSING: Final = MachineDeploymentConditionType.PROGRESSING
REPLICA_FAILURE: Final = MachineDeploymentConditionType.REPLICA_FAILURE

MINIMUM_REPLICAS_AVAILABLE: Final = "MinimumReplicasAvailable"
MINIMUM_REPLICAS_UNAVAILABLE: Final = "MinimumReplicasUnavailable"
NEW_MACHINE_SET_CREATED: Final = "NewMachineSetCreated"
FOUND_NEW_MACHINE_SET: Final = "FoundNewMachineSet"
MACHINE_SET_UPDATED: Final = "MachineSetUpdated"
NEW_MACHINE_SET_AVAILABLE: Final = "NewMachineSetAvailable"
PROGRESS_DEADLINE_EXCEEDED: Final = "ProgressDeadlineExceeded"
MACHINE_SET_CREATE_ERROR: Final = "MachineSetCreateError"
DEPLOYMENT_PAUSED: Final = "DeploymentPaused"
DEPLOYMENT_RESUMED: Final = "DeploymentResumed"
#: ours: the InPlaceUpdate strategy is accepted by validation but not carried out yet


def condition(
    type_: str, status: str, reason: str, message: str, now: datetime
) -> MachineDeploymentCondition:
    return MachineDeploymentCondition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_update_time=now,
        last_transition_time=now,
    )


def with_condition(
    status: MachineDeploymentStatus, new: MachineDeploymentCondition
) -> MachineDeploymentStatus:
    return status.model_copy(update={"conditions": set_condition(status.conditions, new)})


def progressing(status: MachineDeploymentStatus) -> MachineDeploymentCondition | None:
    return get_condition(status.conditions, PROGRESSING)


# --- pause -----------------------------------------------------------------------------------------------


def paused_condition(deployment: MachineDeployment, now: datetime) -> MachineDeploymentCondition | None:
    """MCM's checkPausedConditions: the condition to set, or None. A deadline already reported
    stays reported."""
    current = progressing(deployment.status)
    if current is not None and current.reason == PROGRESS_DEADLINE_EXCEEDED:
        return None
    paused_now = current is not None and current.reason == DEPLOYMENT_PAUSED
    if deployment.spec.paused and not paused_now:
        return condition(PROGRESSING, ConditionStatus.UNKNOWN, DEPLOYMENT_PAUSED, "Deployment is paused", now)
    if not deployment.spec.paused and paused_now:
        return condition(
            PROGRESSING, ConditionStatus.UNKNOWN, DEPLOYMENT_RESUMED, "Deployment is resumed", now
        )
    return None


# --- rollout progress ------------------------------------------------------------------------------------


def is_complete(deployment: MachineDeployment, status: MachineDeploymentStatus) -> bool:
    """All replicas updated and available, nothing old left, the latest generation observed."""
    replicas = deployment.spec.replicas
    return (
        status.updated_replicas == replicas
        and status.replicas == replicas
        and status.available_replicas == replicas
        and status.observed_generation >= (deployment.metadata.generation or 0)
    )


def made_progress(old: MachineDeploymentStatus, new: MachineDeploymentStatus) -> bool:
    """New machines added or became ready/available, or old machines went away."""
    return (
        new.updated_replicas > old.updated_replicas
        or (new.replicas - new.updated_replicas) < (old.replicas - old.updated_replicas)
        or new.ready_replicas > old.ready_replicas
        or new.available_replicas > old.available_replicas
    )


def timed_out(deployment: MachineDeployment, status: MachineDeploymentStatus, now: datetime) -> bool:
    deadline = deployment.spec.progress_deadline_seconds
    current = progressing(status)
    if deadline is None or current is None or current.reason == NEW_MACHINE_SET_AVAILABLE:
        return False
    if current.reason == PROGRESS_DEADLINE_EXCEEDED:
        return True
    base = current.last_update_time or current.last_transition_time
    return base is not None and base + timedelta(seconds=deadline) < now


def _set_name(new_set: MachineSet | None) -> str | None:
    return None if new_set is None else new_set.metadata.name


def rollout_conditions(
    deployment: MachineDeployment,
    previous: MachineDeploymentStatus,
    status: MachineDeploymentStatus,
    new_set: MachineSet | None,
    all_sets: Sequence[MachineSet],
    now: datetime,
) -> MachineDeploymentStatus:
    """MCM's syncRolloutStatus on a freshly computed ``status``: the Progressing estimate (unless the
    rollout already completed), progress being judged against the ``previous`` status (as last
    written), and the ReplicaFailure copied from the sets."""
    current = progressing(status)
    name = _set_name(new_set)
    already_complete = (
        status.replicas == status.updated_replicas
        and current is not None
        and current.reason == NEW_MACHINE_SET_AVAILABLE
    )
    if not already_complete:
        if is_complete(deployment, status):
            what = f'MachineSet "{name}"' if name else f'Machine Deployment "{deployment.metadata.name}"'
            status = with_condition(
                status,
                condition(PROGRESSING, ConditionStatus.TRUE, NEW_MACHINE_SET_AVAILABLE,
                          f"{what} has successfully progressed.", now),
            )  # fmt: skip
        elif made_progress(previous, status):
            what = f'MachineSet "{name}"' if name else f'Machine Deployment "{deployment.metadata.name}"'
            fresh = condition(
                PROGRESSING, ConditionStatus.TRUE, MACHINE_SET_UPDATED, f"{what} is progressing.", now
            )
            mine = progressing(status)
            if mine is not None and mine.status == ConditionStatus.TRUE:
                fresh = fresh.model_copy(update={"last_transition_time": mine.last_transition_time})
            # progress refreshes lastUpdateTime even when the reason stays the same
            status = status.model_copy(
                update={"conditions": [*remove_condition(status.conditions, PROGRESSING), fresh]}
            )
        elif timed_out(deployment, status, now):
            what = f'MachineSet "{name}"' if name else f'Machine Deployment "{deployment.metadata.name}"'
            status = with_condition(
                status,
                condition(PROGRESSING, ConditionStatus.FALSE, PROGRESS_DEADLINE_EXCEEDED,
                          f"{what} has timed out progressing.", now),
            )  # fmt: skip
    return replica_failure(status, new_set, all_sets)


def replica_failure(
    status: MachineDeploymentStatus, new_set: MachineSet | None, all_sets: Sequence[MachineSet]
) -> MachineDeploymentStatus:
    """The ReplicaFailure of the new set, else of any set; removed when none has one."""
    sources = ([new_set] if new_set is not None else []) + [ms for ms in all_sets if ms is not new_set]
    for ms in sources:
        found = get_condition(ms.status.conditions, MachineSetConditionType.REPLICA_FAILURE)
        if found is not None:
            copied = MachineDeploymentCondition(
                type=REPLICA_FAILURE,
                status=found.status,
                reason=found.reason,
                message=found.message,
                last_transition_time=found.last_transition_time,
                last_update_time=found.last_transition_time,
            )
            return with_condition(status, copied)
    return status.model_copy(update={"conditions": remove_condition(status.conditions, REPLICA_FAILURE)})


def deadline_check_after(
    deployment: MachineDeployment, status: MachineDeploymentStatus, now: datetime
) -> float | None:
    """Seconds until the progress deadline should be checked again (MCM's requeueStuckMachineDeployment);
    None when there is nothing to check."""
    deadline = deployment.spec.progress_deadline_seconds
    current = progressing(status)
    if deadline is None or current is None or deployment.spec.paused:
        return None
    if current.reason in (PROGRESS_DEADLINE_EXCEEDED, NEW_MACHINE_SET_AVAILABLE):
        return None
    if is_complete(deployment, status):
        return None
    base = current.last_update_time or current.last_transition_time or now
    remaining = (base + timedelta(seconds=deadline) - now).total_seconds()
    return max(remaining, 0.0) + 1.0
