"""Overshooting (upstream ``reconcileClusterMachineSafetyOvershooting``), as pure decisions: freeze a
MachineSet with far more machines than it may have, and its MachineDeployment with it; unfreeze them once
the count is back down.

Per MachineSet, counting every machine it controls (those being deleted, and those our model cannot
read, too: they are still VMs):

- higher = deployment replicas + ceil(maxSurge) + safetyUp, or 2·replicas + safetyUp for a set no
  deployment controls; lower = higher − safetyDown;
- count ≥ higher → frozen: label ``freeze=True`` and condition ``Frozen`` True, reason
  OverShootingReplicaCount (the MachineSet controller then refuses to scale up);
- frozen and count ≤ lower → unfrozen (label and condition removed);
- the annotation ``safety.machine.sapcloud.io/unfreeze`` on the set, or on its deployment, unfreezes
  at once and is removed; the next pass judges the count again, so an operator who unfreezes a set
  that still overshoots sees it frozen again one period later (as upstream).

A deployment is frozen exactly while one of its sets is, which also repairs a deployment whose label
and condition disagree. Half-frozen sets (label without condition or the reverse) are completed.

Deliberate difference: upstream acts on at most one MachineSet per pass and leaves the rest for the
next period; here every set is judged in every pass, so several runaway sets are all stopped at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from mcm_tasks.api import (
    Machine,
    MachineDeployment,
    MachineDeploymentConditionType,
    MachineSet,
    MachineSetConditionType,
    condition_is_true,
)
from mcm_tasks.api.constants import FREEZE_LABEL_KEY, FREEZE_LABEL_VALUE, UNFREEZE_ANNOTATION
from mcm_tasks.controllers.common.owners import controller_uid
from mcm_tasks.controllers.common.rollout import max_surge

OVERSHOOTING_REASON: Final = "OverShootingReplicaCount"
UNDERSHOOTING_REASON: Final = "UnderShootingReplicaCount"
UNFREEZE_ANNOTATION_REASON: Final = "UnfreezeAnnotation"


class FreezeChange(StrEnum):
    NONE = "none"
    FREEZE = "freeze"
    UNFREEZE = "unfreeze"


@dataclass(frozen=True)
class Decision:
    change: FreezeChange = FreezeChange.NONE
    reason: str = ""
    message: str = ""
    #: whether the object was frozen (label or condition) before this decision
    was_frozen: bool = False


@dataclass(frozen=True)
class Thresholds:
    higher: int
    lower: int


# --- state -----------------------------------------------------------------------------------------------


def _has_label(obj: MachineSet | MachineDeployment) -> bool:
    return obj.metadata.labels.get(FREEZE_LABEL_KEY) == FREEZE_LABEL_VALUE


def _has_condition(obj: MachineSet | MachineDeployment) -> bool:
    if isinstance(obj, MachineSet):
        return condition_is_true(obj.status.conditions, MachineSetConditionType.FROZEN)
    return condition_is_true(obj.status.conditions, MachineDeploymentConditionType.FROZEN)


def is_frozen(obj: MachineSet | MachineDeployment) -> bool:
    return _has_label(obj) or _has_condition(obj)


def fully_frozen(obj: MachineSet | MachineDeployment) -> bool:
    return _has_label(obj) and _has_condition(obj)


def wants_unfreeze(obj: MachineSet | MachineDeployment | None) -> bool:
    return obj is not None and UNFREEZE_ANNOTATION in obj.metadata.annotations


# --- thresholds ------------------------------------------------------------------------------------------


def surge_of(deployment: MachineDeployment) -> int:
    """ceil(maxSurge) of a RollingUpdate deployment; 0 for other strategies or values validation refuses."""
    try:
        return max_surge(deployment)
    except ValueError:
        return 0


def thresholds(
    machine_set: MachineSet, deployment: MachineDeployment | None, safety_up: int, safety_down: int
) -> Thresholds:
    if deployment is None:
        higher = 2 * machine_set.spec.replicas + safety_up
    else:
        higher = deployment.spec.replicas + surge_of(deployment) + safety_up
    return Thresholds(higher, higher - safety_down)


def machines_per_owner(machines: Iterable[Machine]) -> dict[str, int]:
    """Machines per controlling owner uid."""
    counts: dict[str, int] = {}
    for m in machines:
        uid = controller_uid(m.metadata)
        if uid:
            counts[uid] = counts.get(uid, 0) + 1
    return counts


def owning_deployment(
    machine_set: MachineSet, deployments_by_uid: Mapping[str, MachineDeployment]
) -> MachineDeployment | None:
    ref = machine_set.metadata.controller_ref()
    if ref is None or ref.kind != "MachineDeployment":
        return None
    return deployments_by_uid.get(ref.uid)


# --- decisions -------------------------------------------------------------------------------------------


def decide_set(
    machine_set: MachineSet,
    count: int,
    deployment: MachineDeployment | None,
    safety_up: int,
    safety_down: int,
) -> Decision:
    name = machine_set.metadata.name
    frozen = is_frozen(machine_set)
    if wants_unfreeze(machine_set) or wants_unfreeze(deployment):
        return Decision(
            FreezeChange.UNFREEZE,
            UNFREEZE_ANNOTATION_REASON,
            f"MachineSet {name} unfrozen by the {UNFREEZE_ANNOTATION} annotation",
            frozen,
        )
    t = thresholds(machine_set, deployment, safety_up, safety_down)
    if count >= t.higher or (frozen and count > t.lower):
        if fully_frozen(machine_set):
            return Decision(was_frozen=frozen)
        return Decision(
            FreezeChange.FREEZE,
            OVERSHOOTING_REASON,
            f"The number of machines backing MachineSet: {name} is {count} >= {t.higher} "
            "which is the Max-ScaleUp-Limit"
            if count >= t.higher
            else f"MachineSet {name} was partly frozen with {count} machines above {t.lower}; frozen fully",
            frozen,
        )
    if frozen:
        return Decision(
            FreezeChange.UNFREEZE,
            UNDERSHOOTING_REASON,
            f"The number of machines backing MachineSet: {name} is {count} <= {t.lower}",
            frozen,
        )
    return Decision()


def frozen_after(machine_set: MachineSet, decision: Decision) -> bool:
    if decision.change is FreezeChange.NONE:
        return is_frozen(machine_set)
    return decision.change is FreezeChange.FREEZE


def decide_deployment(deployment: MachineDeployment, sets: Sequence[tuple[MachineSet, Decision]]) -> Decision:
    """A deployment follows its sets: frozen while any of them is (after this pass's decisions)."""
    name = deployment.metadata.name
    frozen = is_frozen(deployment)
    if wants_unfreeze(deployment):
        return Decision(
            FreezeChange.UNFREEZE,
            UNFREEZE_ANNOTATION_REASON,
            f"MachineDeployment {name} unfrozen by the {UNFREEZE_ANNOTATION} annotation",
            frozen,
        )
    culprits = [(s, d) for s, d in sets if frozen_after(s, d)]
    if culprits:
        if fully_frozen(deployment):
            return Decision(was_frozen=frozen)
        machine_set, decision = culprits[0]
        message = decision.message or f"MachineSet {machine_set.metadata.name} is frozen"
        return Decision(FreezeChange.FREEZE, OVERSHOOTING_REASON, message, frozen)
    if frozen:
        return Decision(
            FreezeChange.UNFREEZE,
            UNDERSHOOTING_REASON,
            f"No MachineSet of MachineDeployment {name} is frozen any more",
            frozen,
        )
    return Decision()


@dataclass(frozen=True)
class Plan:
    """The changes of one pass, sets first (they carry the freeze that matters)."""

    sets: list[tuple[MachineSet, Decision]]
    deployments: list[tuple[MachineDeployment, Decision]]


def plan(
    machine_sets: Sequence[MachineSet],
    deployments: Sequence[MachineDeployment],
    counts: Mapping[str, int],
    safety_up: int,
    safety_down: int,
) -> Plan:
    """Upstream: ``checkAndFreezeORUnfreezeMachineSets``, ``freezeMachineSetsAndDeployments``,
    ``unfreezeMachineSetsAndDeployments``. ``counts``: machines per controlling owner uid
    (``machines_per_owner``)."""
    by_uid = {d.metadata.uid: d for d in deployments if d.metadata.uid}
    set_decisions: list[tuple[MachineSet, Decision]] = []
    per_deployment: dict[str, list[tuple[MachineSet, Decision]]] = {}
    for ms in machine_sets:
        deployment = owning_deployment(ms, by_uid)
        decision = decide_set(ms, counts.get(ms.metadata.uid or "", 0), deployment, safety_up, safety_down)
        set_decisions.append((ms, decision))
        if deployment is not None:
            per_deployment.setdefault(deployment.metadata.uid or "", []).append((ms, decision))
    deployment_decisions = [
        (d, decide_deployment(d, per_deployment.get(d.metadata.uid or "", []))) for d in deployments
    ]
    return Plan(
        [(s, d) for s, d in set_decisions if d.change is not FreezeChange.NONE],
        [(s, d) for s, d in deployment_decisions if d.change is not FreezeChange.NONE],
    )
