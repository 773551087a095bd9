"""A MachineDeployment's conditions that say why (pure): ``RollingOut``, ``ScalingUp``, ``ScalingDown``
and kstatus' ``Reconciling`` and ``Stalled``, next to MCM's ``Available`` and ``Progressing`` (kept as
MCM sets them, ``progress.py``).

- ``RollingOut`` True while machines run on old MachineSets (their template is not the deployment's),
  naming those sets with their machine counts and what the new set waits for.
- ``ScalingUp`` True while fewer machines run than ``spec.replicas``, with each set's own ScalingUp
  message (which names its pending machines: ``machineset/conditions.py``).
- ``ScalingDown`` True while the deployment has more machines than ``spec.replicas`` (a rolling
  update's surge included), with the sets' ScalingDown messages.
- ``Reconciling`` (kstatus, abnormal-true) True while any of those is, the generation is not yet
  observed, or ``Available`` is False; ``Stalled`` True once the progress deadline is exceeded or
  while ``ReplicaFailure`` is (an invalid spec, machines that cannot be created or deleted). Both
  are absent when settled, so kstatus' ``Current`` means "this generation rolled out and available",
  and GitOps tools (Flux, Argo CD, kpt) wait for exactly that.

``status.observedGeneration`` is written on every status write (``with_why``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from mcm_tasks.api import (
    ConditionStatus,
    MachineDeployment,
    MachineDeploymentCondition,
    MachineDeploymentStatus,
    MachineSet,
    get_condition,
)
from mcm_tasks.controllers.common.conditions import (
    NOT_ROLLING_OUT,
    NOT_SCALING_DOWN,
    NOT_SCALING_UP,
    RECONCILING,
    ROLLING_OUT,
    SCALING_DOWN,
    SCALING_UP,
    STALLED,
    drop,
    put,
)
from mcm_tasks.controllers.machinedeployment.hash import equal_ignore_hash
from mcm_tasks.controllers.machinedeployment.progress import (
    AVAILABLE,
    PROGRESS_DEADLINE_EXCEEDED,
    PROGRESSING,
    REPLICA_FAILURE,
)


def _cond(type_: str, true: bool, reason: str, message: str = "") -> MachineDeploymentCondition:
    status = ConditionStatus.TRUE if true else ConditionStatus.FALSE
    return MachineDeploymentCondition(type=type_, status=status, reason=reason, message=message)


def _set_messages(sets: Sequence[MachineSet], type_: str) -> list[str]:
    out = []
    for ms in sets:
        found = get_condition(ms.status.conditions, type_)
        if found is not None and found.status == ConditionStatus.TRUE and found.message:
            out.append(f"MachineSet {ms.metadata.name}: {found.message}")
    return out


def with_why(
    deployment: MachineDeployment, status: MachineDeploymentStatus, sets: Sequence[MachineSet], now: datetime
) -> MachineDeploymentStatus:
    """``status`` (about to be written) with the why-conditions for the deployment's ``sets`` and the
    deployment's generation observed."""
    generation = deployment.metadata.generation or 0
    status = status.model_copy(update={"observed_generation": max(status.observed_generation, generation)})
    conditions = list(status.conditions)
    if deployment.metadata.is_deleting:
        for type_ in (ROLLING_OUT, SCALING_UP, SCALING_DOWN, RECONCILING, STALLED):
            conditions = drop(conditions, type_)
        return status.model_copy(update={"conditions": conditions})
    desired = deployment.spec.replicas
    new_set = next((ms for ms in sets if equal_ignore_hash(ms.spec.template, deployment.spec.template)), None)
    old = [ms for ms in sets if ms is not new_set and ms.status.replicas > 0]
    if old:
        on_old = sum(ms.status.replicas for ms in old)
        names = ", ".join(f"{ms.metadata.name} ({ms.status.replicas})" for ms in old)
        parts = [f"Rolling out: {on_old} machines on old MachineSets {names}; "
                 f"{status.updated_replicas}/{desired} updated"]  # fmt: skip
        if new_set is not None:
            parts += _set_messages([new_set], SCALING_UP)
        rolling = _cond(ROLLING_OUT, True, ROLLING_OUT, "; ".join(parts))
    else:
        rolling = _cond(ROLLING_OUT, False, NOT_ROLLING_OUT)
    if status.ready_replicas < desired:
        message = "; ".join([f"Scaling up from {status.ready_replicas} to {desired} running machines",
                             *_set_messages(sets, SCALING_UP)])  # fmt: skip
        up = _cond(SCALING_UP, True, SCALING_UP, message)
    else:
        up = _cond(SCALING_UP, False, NOT_SCALING_UP)
    if status.replicas > desired:
        message = "; ".join([f"Scaling down from {status.replicas} to {desired} machines",
                             *_set_messages(sets, SCALING_DOWN)])  # fmt: skip
        down = _cond(SCALING_DOWN, True, SCALING_DOWN, message)
    else:
        down = _cond(SCALING_DOWN, False, NOT_SCALING_DOWN)
    for new in (rolling, up, down):
        conditions = put(conditions, new, now)
    available = get_condition(conditions, AVAILABLE)
    busy = next((c for c in (rolling, up, down) if c.status == ConditionStatus.TRUE), None)
    if busy is not None:
        conditions = put(conditions, _cond(RECONCILING, True, busy.reason, busy.message), now)
    elif available is not None and available.status != ConditionStatus.TRUE:
        conditions = put(conditions, _cond(RECONCILING, True, available.reason, available.message), now)
    else:
        conditions = drop(conditions, RECONCILING)
    progressing = get_condition(conditions, PROGRESSING)
    failure = get_condition(conditions, REPLICA_FAILURE)
    if progressing is not None and progressing.reason == PROGRESS_DEADLINE_EXCEEDED:
        message = "; ".join(m for m in (progressing.message, busy.message if busy else "") if m)
        conditions = put(conditions, _cond(STALLED, True, PROGRESS_DEADLINE_EXCEEDED, message), now)
    elif failure is not None and failure.status == ConditionStatus.TRUE:
        conditions = put(conditions, _cond(STALLED, True, failure.reason, failure.message), now)
    else:
        conditions = drop(conditions, STALLED)
    return status.model_copy(update={"conditions": conditions})
