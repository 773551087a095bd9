"""The InPlaceUpdate strategy's pass (upstream ``rolloutInPlace``): labels, taints and moves of
machines and Nodes through the pass's ``Context``; ``inplace.py`` decides the budgets, the patches and
which labels move.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from mcm_tasks import kinds
from mcm_tasks.api import MachineSet, Obj, OrchestrationType
from mcm_tasks.api.constants import (
    CANDIDATE_FOR_UPDATE_LABEL_KEY,
    SCALE_UP_DISABLED_LABEL_KEY,
    SELECTED_FOR_UPDATE_LABEL_KEY,
    UPDATE_RESULT_LABEL_KEY,
)
from mcm_tasks.controllers.common import inplace as ip
from mcm_tasks.controllers.machinedeployment import sets_io, taints, taints_io
from mcm_tasks.controllers.machinedeployment.inplace import (
    _meta,
    _node_of,
    cleared_node,
    moved_labels,
    node_needs_clearing,
    selection_budget,
    stale_preserve_annotations,
)
from mcm_tasks.controllers.machinedeployment.scope import Context
from mcm_tasks.controllers.machinedeployment.sync_io import finish_rollout
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe

log = logging.getLogger(__name__)


def rollout_in_place(ctx: Context) -> float | None:
    """One pass of the InPlaceUpdate strategy (upstream ``rolloutInPlace``); seconds until the next
    deadline check, if any."""
    new_set, old_sets = sets_io.new_and_old(ctx, create=True)
    assert new_set is not None
    running = taints.rollout_running(old_sets)
    if running:
        _label_sets(ctx, old_sets, present=True)
        # the sets as the label write left them: the taint marker's write is guarded by their version
        old_sets = [sets_io.current(ctx, ms) or ms for ms in old_sets]
    taints_io.taint_old_sets(ctx, old_sets, protect=running)
    if running:
        taints_io.protect_from_scale_down(ctx, [*old_sets, new_set])
    old_sets = [sets_io.current(ctx, ms) or ms for ms in old_sets]
    new_set = sets_io.current(ctx, new_set) or new_set
    _label_candidates(ctx, old_sets)
    _clear_updated_nodes(ctx, new_set)

    if _count_arrivals(ctx, new_set) or _shrink_to_members(ctx, old_sets):
        return finish_rollout(ctx, new_set, old_sets, complete_actions=False)
    if _reconcile_new_set(ctx, new_set, old_sets):
        return finish_rollout(ctx, new_set, old_sets, complete_actions=False)
    if _reconcile_old_sets(ctx, new_set, old_sets):
        return finish_rollout(ctx, new_set, old_sets, complete_actions=False)
    if not running:
        _label_sets(ctx, old_sets, present=False)
    return finish_rollout(ctx, new_set, old_sets, complete_actions=True)


def _label_sets(ctx: Context, machine_sets_: Sequence[MachineSet], *, present: bool) -> None:
    """Upstream ``labelMachineSets``: the old sets' ``scale-up-disabled`` label on (or off)."""
    for ms in machine_sets_:
        if (SCALE_UP_DISABLED_LABEL_KEY in ms.metadata.labels) == present:
            continue
        labels = dict(ms.metadata.labels)
        if present:
            labels[SCALE_UP_DISABLED_LABEL_KEY] = "true"
        else:
            labels.pop(SCALE_UP_DISABLED_LABEL_KEY, None)
        current = sets_io.current(ctx, ms) or ms
        ctx.update_set(
            current,
            current.model_copy(update={"metadata": current.metadata.model_copy(update={"labels": labels})}),
        )


def _patch_node(ctx: Context, name: str, body: Obj) -> Obj | None:
    """The Node as the patch left it, or None (no target cluster, or the write failed: logged)."""
    if ctx.target is None:
        return None
    try:
        return ops.patch(ctx.target, kinds.NODE.resource, name, body)
    except Exception as err:
        log.warning("MachineDeployment %s: node %s: %s", ctx.key, name, describe(err))
        return None


def _label_candidates(ctx: Context, old_sets: Sequence[MachineSet]) -> None:
    """Upstream ``labelNodesBackingMachineSets``: the old sets' Nodes are ``candidate-for-update``."""
    names = [_node_of(m) for ms in old_sets for m in ctx.machines_of(ms) if _node_of(m)]
    for name, node in ctx.get_nodes(names).items():
        if CANDIDATE_FOR_UPDATE_LABEL_KEY not in ip.labels_of(node):
            _patch_node(ctx, name, {"metadata": {"labels": {CANDIDATE_FOR_UPDATE_LABEL_KEY: "true"}}})


def _clear_node(ctx: Context, name: str, node: Obj) -> None:
    """``cleared_node``, then the rollout's PreferNoSchedule taint off the Node (``_untaint``),
    guarded by the resourceVersion the first patch returned: the one read before it is stale by then,
    and its taint write could only conflict."""
    cleared = _patch_node(ctx, name, cleared_node())
    _untaint(ctx, name, cleared if cleared is not None else node)


def _untaint(ctx: Context, name: str, node: Obj) -> None:
    """The PreferNoSchedule taint the Node got while its machine was in an old set, off it now that
    the machine is the new set's (upstream ``syncMachineSets``). The completion's
    ``taints_io.untaint_set`` does not reach these Nodes (it untaints the sets it tainted), so each
    pass looks again. The taint list is written guarded by the Node's resourceVersion, as every
    taint write here, and apart from the labels: a Conflict is retried next pass."""
    untaint = taints.remove_prefer_no_schedule(node)
    if untaint is not None:
        _patch_node(ctx, name, untaint)


def _clear_updated_nodes(ctx: Context, new_set: MachineSet) -> None:
    """Upstream ``syncMachineSets``' node part (``node_needs_clearing``), and the old sets' taint off
    the new set's Nodes."""
    names = [_node_of(m) for m in ctx.machines_of(new_set) if _node_of(m)]
    for name, node in ctx.get_nodes(names).items():
        if node_needs_clearing(node):
            _clear_node(ctx, name, node)
            log.info("MachineDeployment %s: node %s updated in place: update labels cleared", ctx.key, name)
        else:
            _untaint(ctx, name, node)


def _count_arrivals(ctx: Context, new_set: MachineSet) -> bool:
    """Upstream ``syncMachineSets``' first half: machines moved into the new set (still marked)
    are counted in its replicas, then unmarked."""
    arrived = [
        m for m in ctx.machines_of(new_set) if (_meta(m).get("labels") or {}).get(UPDATE_RESULT_LABEL_KEY)
    ]
    if not arrived:
        return False
    members = len(ctx.machines_of(new_set))
    wanted = min(members, ctx.deployment.spec.replicas)
    if wanted > new_set.spec.replicas:
        sets_io.scale_set(ctx, new_set, wanted)
    for machine in arrived:
        ops.patch(ctx.api, kinds.MACHINE.resource, str(_meta(machine)["name"]),
                  {"metadata": {"labels": {UPDATE_RESULT_LABEL_KEY: None}}}, ctx.namespace)  # fmt: skip
    return True


def _reconcile_new_set(ctx: Context, new_set: MachineSet, old_sets: Sequence[MachineSet]) -> bool:
    """Upstream ``reconcileNewMachineSetInPlace``: whether a set was scaled (or a machine moved)."""
    replicas = ctx.deployment.spec.replicas
    if new_set.spec.replicas == replicas:
        return False
    if new_set.spec.replicas > replicas:
        return sets_io.scale_set(ctx, new_set, replicas)
    old_total = sum(ms.spec.replicas for ms in old_sets)
    # A machine an old set still shows beyond its replicas is not lost but in flight: moved by an
    # earlier pass that also scaled its old set down, the set's write already mirrored and the
    # machine's not (two watches); made up for, it would be replaced by a new VM. That holds for
    # the last one too, when the old sets read as empty.
    in_flight = sum(max(0, len(_staying(ctx.machines_of(ms))) - ms.spec.replicas) for ms in old_sets)
    if old_total == 0 and in_flight == 0:
        return sets_io.scale_set(ctx, new_set, replicas)
    if old_total > 0 and _transfer(ctx, new_set, old_sets) > 0:
        return True
    # an old set lost a machine it may not replace (a failed update): the new set makes up for it
    # with a machine of the new template (upstream waits here; its budget can then never open)
    shortfall = replicas - old_total - new_set.spec.replicas - in_flight
    if shortfall > 0:
        return sets_io.scale_set(ctx, new_set, new_set.spec.replicas + shortfall)
    return False


def _staying(machines: Sequence[Obj]) -> list[Obj]:
    """The machines not being deleted (a deleted one is not coming to the new set)."""
    return [m for m in machines if not _meta(m).get("deletionTimestamp")]


def _transfer(ctx: Context, new_set: MachineSet, old_sets: Sequence[MachineSet]) -> int:
    """Upstream ``transferMachinesFromOldToNewMachineSet``: each machine whose Node was updated
    successfully becomes the new set's; its old set shrinks by one."""
    moved_total = 0
    for old in old_sets:
        machines = ctx.machines_of(old)
        nodes = ctx.get_nodes([_node_of(m) for m in machines if _node_of(m)])
        moved = 0
        for machine in machines:
            node = nodes.get(_node_of(machine))
            phase = ((machine.get("status") or {}).get("currentStatus") or {}).get("phase")
            if node is None or not ip.update_succeeded(node) or phase == "InPlaceUpdating":
                continue
            meta = _meta(machine)
            labels = moved_labels(dict(meta.get("labels") or {}), old, new_set)
            ref = {
                "apiVersion": "machine.sapcloud.io/v1alpha1",
                "kind": "MachineSet",
                "name": new_set.metadata.name,
                "uid": new_set.metadata.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
            body: Obj = {
                "metadata": {
                    "labels": labels,
                    "ownerReferences": [ref],
                    "resourceVersion": meta.get("resourceVersion"),
                }
            }
            stale = stale_preserve_annotations(dict(meta.get("annotations") or {}))
            if stale:
                body["metadata"]["annotations"] = stale
            ops.patch(ctx.api, kinds.MACHINE.resource, str(meta["name"]), body, ctx.namespace)
            _clear_node(ctx, _node_of(machine), node)
            log.info("MachineDeployment %s: machine %s updated in place, moved to %s",
                     ctx.key, meta["name"], new_set.metadata.name)  # fmt: skip
            moved += 1
        if moved:
            current = sets_io.current(ctx, old) or old
            sets_io.scale_set(ctx, current, max(0, current.spec.replicas - moved))
            moved_total += moved
    return moved_total


def _selected_live(ctx: Context) -> set[str] | None:
    """The target's Nodes labelled ``selected-for-update`` now, from the API server (one LIST,
    filtered there by the label; only on a pass about to select); None when it cannot be read (the
    mirror's count stands, as before)."""
    if ctx.target is None:
        return None
    try:
        found = ops.list_(ctx.target, kinds.NODE.resource, None, label_selector=SELECTED_FOR_UPDATE_LABEL_KEY)
    except Exception as err:
        log.warning("MachineDeployment %s: selected Nodes not read: %s", ctx.key, describe(err))
        return None
    return {
        str(_meta(n).get("name"))
        for n in found.get("items") or ()
        if SELECTED_FOR_UPDATE_LABEL_KEY in ip.labels_of(n)
    }


def _shrink_to_members(ctx: Context, old_sets: Sequence[MachineSet]) -> bool:
    """Upstream ``syncMachineSets``' last part: an old set that lost machines (a failed update
    replaced, a machine deleted) cannot replace them (scale-up disabled): its replicas follow."""
    scaled = False
    for ms in old_sets:
        members = len(_staying(ctx.machines_of(ms)))
        if members < ms.spec.replicas:
            current = sets_io.current(ctx, ms) or ms
            scaled = sets_io.scale_set(ctx, current, members) or scaled
    return scaled


def _reconcile_old_sets(ctx: Context, new_set: MachineSet, old_sets: Sequence[MachineSet]) -> bool:
    """Upstream ``reconcileOldMachineSetsInPlace``: old sets to zero once the new set is full,
    else (Auto) select Nodes for update within the budget: those selected already count as
    undergoing one (``getMachinesUndergoingUpdate``), candidates not yet selected are labelled
    ``selected-for-update``, oldest set first (``getMachinesForDrain``,
    ``labelMachinesToSelectedForUpdate``)."""
    olds = [ms for ms in old_sets if ms.spec.replicas > 0]
    if not olds:
        return False
    if new_set.spec.replicas == ctx.deployment.spec.replicas:
        return any([sets_io.scale_set(ctx, ms, 0) for ms in olds])
    strategy = ctx.deployment.spec.strategy.in_place_update
    if strategy is None or strategy.orchestration_type != OrchestrationType.AUTO:
        return False  # Manual: an operator selects the Nodes
    candidates: list[str] = []
    old_nodes: list[str] = []
    undergoing = 0
    for ms in sorted(olds, key=lambda s: s.metadata.creation_timestamp or ctx.now):
        machines = ctx.machines_of(ms)
        names = [_node_of(m) for m in machines if _node_of(m)]
        old_nodes.extend(names)
        nodes = ctx.get_nodes(names)
        for machine in machines:
            node = nodes.get(_node_of(machine))
            if node is None:
                continue
            labels = ip.labels_of(node)
            if SELECTED_FOR_UPDATE_LABEL_KEY in labels:
                undergoing += 1
            elif CANDIDATE_FOR_UPDATE_LABEL_KEY in labels:
                candidates.append(_node_of(machine))
    all_sets = [*old_sets, new_set]
    budget = selection_budget(ctx.deployment, all_sets, new_set, undergoing)
    if budget > 0 and candidates:
        # the mirror may not show a selection this deployment's previous pass made moments ago:
        # counted from it alone, a second pass would select again and exceed maxUnavailable
        selected = _selected_live(ctx)
        if selected is not None:
            candidates = [name for name in candidates if name not in selected]
            undergoing = max(undergoing, len(selected & set(old_nodes)))
            budget = selection_budget(ctx.deployment, all_sets, new_set, undergoing)
    chosen = candidates[:budget]
    for name in chosen:
        _patch_node(ctx, name, {"metadata": {"labels": {SELECTED_FOR_UPDATE_LABEL_KEY: "true"}}})
        log.info("MachineDeployment %s: node %s selected for update", ctx.key, name)
    return bool(chosen)
