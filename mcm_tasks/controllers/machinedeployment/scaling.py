"""The arithmetic of a deployment's MachineSets (pure): surge and unavailability budgets, how big the
new set may grow, how far old sets may shrink, and proportional scaling.

A decision is a ``Sizes`` mapping (set name → new ``spec.replicas``), in the order the writes should
happen; the caller writes only the entries that change something.

Two deliberate differences from MCM make the budgets hold while the MachineSets' statuses lag behind
their specs (a set just scaled has not created or deleted its machines yet):

- a set occupies ``max(spec.replicas, status.replicas)``: MCM sums ``status.replicas`` when it sizes
  the new set, which lets two passes in a row both scale up before the first scale-up shows in the
  status; a spec just lowered still counts its machines until they are gone;
- a set counts ``min(status.availableReplicas, spec.replicas)`` available machines: a set scaled down
  deletes its unavailable machines first, so what it will keep available is bounded by its spec (the
  scale-down budget, computed from specs, already stops a second pass on a stale status; this keeps
  the surplus itself honest too).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from mcm_tasks.api import MachineDeployment, MachineSet
from mcm_tasks.api.constants import DESIRED_REPLICAS_ANNOTATION, MAX_REPLICAS_ANNOTATION
from mcm_tasks.controllers.common.rollout import is_manual_in_place, is_rolling, max_surge, max_unavailable
from mcm_tasks.controllers.machinedeployment.revisions import int_annotation

#: set name → new spec.replicas, in write order
Sizes = dict[str, int]

_EPOCH = datetime.min.replace(tzinfo=UTC)


# --- budgets ---------------------------------------------------------------------------------------------


def min_available(deployment: MachineDeployment) -> int:
    return deployment.spec.replicas - max_unavailable(deployment)


# --- reading sets ----------------------------------------------------------------------------------------


def occupancy(machine_set: MachineSet) -> int:
    """Machines the set has or is about to have."""
    return max(machine_set.spec.replicas, machine_set.status.replicas)


def available(machine_set: MachineSet) -> int:
    """Available machines the set keeps once it reached its spec."""
    return max(0, min(machine_set.status.available_replicas, machine_set.spec.replicas))


def active(machine_sets: Iterable[MachineSet | None]) -> list[MachineSet]:
    """Sets that should have machines (spec.replicas > 0)."""
    return [ms for ms in machine_sets if ms is not None and ms.spec.replicas > 0]


def by_age(machine_sets: Iterable[MachineSet]) -> list[MachineSet]:
    """Oldest first; the name breaks ties so the order is total."""
    return sorted(
        machine_sets, key=lambda ms: (ms.metadata.creation_timestamp or _EPOCH, ms.metadata.name or "")
    )


def _age_key(machine_set: MachineSet) -> tuple[datetime, str]:
    return machine_set.metadata.creation_timestamp or _EPOCH, machine_set.metadata.name or ""


# --- the new set -----------------------------------------------------------------------------------------


def new_set_replicas(
    deployment: MachineDeployment, all_sets: Sequence[MachineSet], new_set: MachineSet
) -> int:
    """How big the new set may be now (upstream ``NewISNewReplicas``): Recreate → replicas;
    RollingUpdate and Auto InPlaceUpdate → grow by what the surge budget leaves (replicas +
    maxSurge − machines of all sets), never beyond replicas; Manual InPlaceUpdate → 0: the new set
    holds only the machines an operator had updated and the deployment moved to it."""
    replicas = deployment.spec.replicas
    if is_manual_in_place(deployment):
        return 0
    if not is_rolling(deployment):
        return replicas
    room = replicas + max_surge(deployment) - sum(occupancy(ms) for ms in all_sets)
    if room <= 0:
        return new_set.spec.replicas
    return new_set.spec.replicas + max(0, min(room, replicas - new_set.spec.replicas))


def is_saturated(deployment: MachineDeployment, new_set: MachineSet | None) -> bool:
    """The new set holds all replicas, knows it (desired-replicas annotation) and has them available."""
    if new_set is None:
        return False
    replicas = deployment.spec.replicas
    desired = int_annotation(new_set.metadata.annotations, DESIRED_REPLICAS_ANNOTATION)
    return (
        new_set.spec.replicas == replicas
        and desired == replicas
        and new_set.status.available_replicas == replicas
    )


# --- scaling events --------------------------------------------------------------------------------------


def is_scaling_event(
    deployment: MachineDeployment, new_set: MachineSet | None, old_sets: Sequence[MachineSet]
) -> bool:
    """The deployment's replicas changed since its sets were sized: an active set's desired-replicas
    annotation differs from replicas, or nothing is active, replicas > 0 and a new set exists to take
    them (without a new set the strategy creates one, already sized) that was not sized for these
    replicas. A new set at zero whose annotation already says these replicas is a rollout's moment,
    not a scale from zero: an in-place update's last move, the old set scaled to zero before the
    machines' watch shows the machine in the new set; the strategy counts it there, and filling the
    new set here would make its MachineSet create a machine for the one in flight.

    Upstream: ``isScalingEvent`` (active sets only)."""
    replicas = deployment.spec.replicas
    sets = active([*old_sets, new_set])
    if not sets:
        if replicas <= 0 or new_set is None:
            return False
        return int_annotation(new_set.metadata.annotations, DESIRED_REPLICAS_ANNOTATION) != replicas
    for ms in sets:
        desired = int_annotation(ms.metadata.annotations, DESIRED_REPLICAS_ANNOTATION)
        if desired is not None and desired != replicas:
            return True
    return False


def find_active_or_latest(new_set: MachineSet | None, old_sets: Sequence[MachineSet]) -> MachineSet | None:
    """The set to give all replicas to when at most one set is active: that set, or with none active
    the new set, else the newest old one. None when several are active (scale proportionally)."""
    if new_set is None and not old_sets:
        return None
    sets = active([*old_sets, new_set])
    if len(sets) == 1:
        return sets[0]
    if sets:
        return None
    if new_set is not None:
        return new_set
    return max(old_sets, key=_age_key)


def _fraction(machine_set: MachineSet, deployment: MachineDeployment) -> int:
    """What the set's size becomes in proportion to the new deployment size, minus its size now."""
    if deployment.spec.replicas == 0:
        return -machine_set.spec.replicas
    target = deployment.spec.replicas + max_surge(deployment)
    annotated = int_annotation(machine_set.metadata.annotations, MAX_REPLICAS_ANNOTATION)
    if not annotated:
        annotated = deployment.status.replicas or target
    # Go's math.Round: halves away from zero
    scaled = machine_set.spec.replicas * target / annotated
    rounded = int(scaled + 0.5) if scaled >= 0 else -int(-scaled + 0.5)
    return rounded - machine_set.spec.replicas


def proportion(machine_set: MachineSet, deployment: MachineDeployment, to_add: int, added: int) -> int:
    """MCM's GetProportion: the set's share of ``to_add`` (bounded by what is left to add)."""
    if machine_set.spec.replicas == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = _fraction(machine_set, deployment)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def plan_scale(
    deployment: MachineDeployment, new_set: MachineSet | None, old_sets: Sequence[MachineSet]
) -> Sizes:
    """MCM's scale(): the sizes for a scaling event (or a paused deployment).

    One active set (or none) takes all replicas; a saturated new set empties the old ones; otherwise,
    for a RollingUpdate, the sets together may hold replicas + maxSurge: an increase goes to the new
    set (up to replicas), a decrease is shared in proportion to the sets' sizes (largest first, older
    first among equals), what rounding leaves over going to the largest.
    """
    replicas = deployment.spec.replicas
    single = find_active_or_latest(new_set, old_sets)
    if single is not None:
        return {single.metadata.name or "": replicas}
    if is_saturated(deployment, new_set):
        return {ms.metadata.name or "": 0 for ms in active(old_sets)}
    if not is_rolling(deployment):
        return {}
    sets = active([*old_sets, new_set])
    allowed = replicas + max_surge(deployment) if replicas > 0 else 0
    to_add = allowed - sum(ms.spec.replicas for ms in sets)
    sizes: Sizes = {ms.metadata.name or "": ms.spec.replicas for ms in sets}
    if to_add > 0 and new_set is not None:
        grown = min(new_set.spec.replicas + to_add, max(replicas, new_set.spec.replicas))
        return {**sizes, new_set.metadata.name or "": grown}
    if to_add == 0:
        return sizes
    if to_add > 0:
        # no new set yet: newer sets first among equals
        order = sorted(sets, key=lambda ms: (-ms.spec.replicas, _neg_age(ms)))
    else:
        order = sorted(sets, key=lambda ms: (-ms.spec.replicas, _age_key(ms)))
    added = 0
    for ms in order:
        share = proportion(ms, deployment, to_add, added)
        sizes[ms.metadata.name or ""] = ms.spec.replicas + share
        added += share
    largest = order[0].metadata.name or ""
    sizes[largest] = max(0, sizes[largest] + to_add - added)
    return {ms.metadata.name or "": sizes[ms.metadata.name or ""] for ms in order}


def _neg_age(machine_set: MachineSet) -> tuple[float, str]:
    created = machine_set.metadata.creation_timestamp or _EPOCH
    return -created.timestamp(), machine_set.metadata.name or ""


# --- scaling old sets down -------------------------------------------------------------------------------


def max_scaled_down(
    deployment: MachineDeployment, all_sets: Sequence[MachineSet], new_set: MachineSet
) -> int:
    """How many old machines may go: all desired machines − the minimum available − the new set's
    machines that are not available yet (they may never become so)."""
    new_unavailable = new_set.spec.replicas - available(new_set)
    return sum(ms.spec.replicas for ms in all_sets) - min_available(deployment) - new_unavailable


def cleanup_unhealthy(old_sets: Sequence[MachineSet], budget: int) -> Sizes:
    """Shrink old sets by their unavailable machines first (oldest set first), up to ``budget``:
    removing a machine that is not available costs no availability.

    Upstream: ``cleanupUnhealthyReplicas``.
    """
    sizes: Sizes = {}
    done = 0
    for ms in by_age(old_sets):
        if done >= budget:
            break
        unhealthy = ms.spec.replicas - available(ms)
        if ms.spec.replicas == 0 or unhealthy <= 0:
            continue
        count = min(budget - done, unhealthy)
        sizes[ms.metadata.name or ""] = ms.spec.replicas - count
        done += count
    return sizes


def scale_down_old(
    deployment: MachineDeployment, all_sets: Sequence[MachineSet], old_sets: Sequence[MachineSet]
) -> Sizes:
    """Shrink old sets (oldest first) by the available machines above the minimum.

    Upstream: ``scaleDownOldMachineSetsForRollingUpdate``.
    """
    surplus = sum(available(ms) for ms in all_sets) - min_available(deployment)
    sizes: Sizes = {}
    for ms in by_age(old_sets):
        if surplus <= 0:
            break
        if ms.spec.replicas == 0:
            continue
        count = min(ms.spec.replicas, surplus)
        sizes[ms.metadata.name or ""] = ms.spec.replicas - count
        surplus -= count
    return sizes


def with_sizes(machine_sets: Sequence[MachineSet], sizes: Sizes) -> list[MachineSet]:
    """The sets as they will be once ``sizes`` are written (for the next step of a plan)."""
    out = []
    for ms in machine_sets:
        size = sizes.get(ms.metadata.name or "")
        out.append(
            ms
            if size is None
            else ms.model_copy(update={"spec": ms.spec.model_copy(update={"replicas": size})})
        )
    return out


def changed(machine_sets: Sequence[MachineSet], sizes: Sizes) -> Sizes:
    """Only the entries that change a set's spec.replicas."""
    current = {ms.metadata.name or "": ms.spec.replicas for ms in machine_sets}
    return {name: size for name, size in sizes.items() if current.get(name) != size}


def desired_annotation_stale(deployment: MachineDeployment, machine_set: MachineSet) -> bool:
    wanted = (deployment.spec.replicas, deployment.spec.replicas + max_surge(deployment))
    annotations = machine_set.metadata.annotations
    have = (
        int_annotation(annotations, DESIRED_REPLICAS_ANNOTATION),
        int_annotation(annotations, MAX_REPLICAS_ANNOTATION),
    )
    return have != wanted
