"""The rollout's marks on Nodes, written: the PreferNoSchedule taint and the autoscaler's scale-down
protection, put on and taken off the target cluster's Nodes (``apply``) and recorded on the sets;
``taints.py`` decides each Node's patch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.api import MachineSet, Obj
from mcm_tasks.api.constants import (
    NODE_LABEL_KEY,
    PREFER_NO_SCHEDULE_KEY,
    PREFER_NO_SCHEDULE_TAINT_VALUE,
)
from mcm_tasks.controllers.machinedeployment.scope import Context
from mcm_tasks.controllers.machinedeployment.seen import PROTECTED_NODES
from mcm_tasks.controllers.machinedeployment.taints import (
    NodeChange,
    _meta,
    add_prefer_no_schedule,
    add_scale_down_protection,
    combined,
    remove_prefer_no_schedule,
    remove_scale_down_protection,
)
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe, is_conflict, is_not_found

log = logging.getLogger(__name__)


def node_names(ctx: Context, machine_sets: Iterable[MachineSet], *, once: bool = False) -> list[str]:
    """Nodes of the sets' machines (the machines' ``node`` label), each once. ``once``: see
    ``Context.machines_of``."""
    names: dict[str, None] = {}
    for ms in machine_sets:
        for machine in ctx.machines_of(ms, lag_ok=True, once=once):
            node = (_meta(machine).get("labels") or {}).get(NODE_LABEL_KEY)
            if node:
                names[node] = None
    return list(names)


def apply(ctx: Context, nodes: Sequence[str], change: NodeChange, *, once: bool = False) -> int:
    """Apply a decision to each node (re-deciding on a fresh read after a Conflict); the nodes
    changed. Errors are logged, not raised. ``once``: see ``Context.machines_of``."""
    return _apply(ctx, nodes, change, once=once)[0]


def _apply(
    ctx: Context, nodes: Sequence[str], change: NodeChange, *, once: bool = False
) -> tuple[int, list[str]]:
    """``apply``, and the nodes that now need no change (none failed to take it)."""
    if ctx.target is None:
        return 0, []
    changed, settled = 0, []
    for name, node in ctx.get_nodes(nodes, lag_ok=True, once=once).items():
        if change(node) is None:
            settled.append(name)
            continue
        try:
            changed += _apply_one(ctx.target, node, change)
        except Exception as err:
            log.warning("MachineDeployment %s: could not update node %s: %s", ctx.key, name, describe(err))
            continue
        settled.append(name)
    return changed, settled


def _apply_one(target: ApiClient, node: Obj, change: NodeChange) -> int:
    name = str(_meta(node).get("name"))
    current: list[Obj | None] = [node]

    def attempt() -> int:
        obj = current[0]
        body = None if obj is None else change(obj)
        if body is None:
            return 0
        try:
            ops.patch(target, kinds.NODE.resource, name, body)
        except Exception as err:
            if is_not_found(err):
                return 0
            if is_conflict(err):
                current[0] = ops.get(target, kinds.NODE.resource, name, missing_ok=True)
            raise
        return 1

    return ops.retry_on_conflict(attempt)


def _set_annotation(ctx: Context, machine_set: MachineSet, value: str | None) -> None:
    annotations = dict(machine_set.metadata.annotations)
    if value is None:
        annotations.pop(PREFER_NO_SCHEDULE_KEY, None)
    else:
        annotations[PREFER_NO_SCHEDULE_KEY] = value
    desired = machine_set.model_copy(
        update={"metadata": machine_set.metadata.model_copy(update={"annotations": annotations})}
    )
    ctx.update_set(machine_set, desired)


def taint_old_sets(ctx: Context, old_sets: Sequence[MachineSet], *, protect: bool = False) -> None:
    """PreferNoSchedule on the nodes of old sets not tainted yet, then mark each such set. With
    ``protect`` (the rollout runs), the scale-down protection goes on in the same write of each of
    those nodes (and ``protect_from_scale_down`` then finds them protected): at the start of a
    rollout of 300, 300 node writes instead of 600."""
    if ctx.target is None:
        return
    protect = protect and ctx.settings.autoscaler_scaledown_annotation_during_rollout
    change: NodeChange = add_prefer_no_schedule
    if protect:
        change = combined(add_prefer_no_schedule, add_scale_down_protection)
    uid, generation = _rollout(ctx)
    for ms in old_sets:
        if PREFER_NO_SCHEDULE_KEY in ms.metadata.annotations:
            continue
        count, settled = _apply(ctx, node_names(ctx, [ms]), change)
        if protect:
            PROTECTED_NODES.remember({(uid, generation, n): True for n in settled}, ctx.settings.short_retry)
        log.info("MachineDeployment %s: tainted %d nodes of old MachineSet %s with %s",
                 ctx.key, count, ms.metadata.name, PREFER_NO_SCHEDULE_KEY)  # fmt: skip
        _set_annotation(ctx, ms, PREFER_NO_SCHEDULE_TAINT_VALUE)


def untaint_set(ctx: Context, machine_set: MachineSet) -> None:
    """Take PreferNoSchedule off a set's nodes and its marker off the set."""
    if ctx.target is None or PREFER_NO_SCHEDULE_KEY not in machine_set.metadata.annotations:
        return
    count = apply(ctx, node_names(ctx, [machine_set]), remove_prefer_no_schedule)
    log.info("MachineDeployment %s: removed %s from %d nodes of MachineSet %s",
             ctx.key, PREFER_NO_SCHEDULE_KEY, count, machine_set.metadata.name)  # fmt: skip
    _set_annotation(ctx, machine_set, None)


def _rollout(ctx: Context) -> tuple[str, int]:
    meta = ctx.deployment.metadata
    return meta.uid or ctx.key, meta.generation or 0


def protect_from_scale_down(ctx: Context, machine_sets: Sequence[MachineSet]) -> None:
    """Upstream ``annotateNodesBackingMachineSets``: once per node (a protected node is not written
    again; the machine controller's preservation step leaves this protection alone). Reads only the
    machines and nodes this process has not seen within ShortRetry (see the module)."""
    if not ctx.settings.autoscaler_scaledown_annotation_during_rollout or ctx.target is None:
        return
    uid, generation = _rollout(ctx)
    max_age = ctx.settings.short_retry
    names = ctx.nodes_of(machine_sets, max_age)
    checked = PROTECTED_NODES.fresh(((uid, generation, n) for n in names), max_age)
    unchecked = [n for n in names if (uid, generation, n) not in checked]
    if unchecked:
        settled = _apply(ctx, unchecked, add_scale_down_protection)[1]
        PROTECTED_NODES.remember({(uid, generation, n): True for n in settled}, max_age)


def end_scale_down_protection(ctx: Context, machine_sets: Sequence[MachineSet]) -> None:
    """Upstream ``removeAutoscalerAnnotationsIfRequired``: only where the ``…-by-mcm`` marker is.
    Once per completed rollout: its reads of every machine and node are not kept (``once``)."""
    if ctx.settings.autoscaler_scaledown_annotation_during_rollout:
        uid = _rollout(ctx)[0]
        PROTECTED_NODES.forget_where(lambda k: k[0] == uid)
        apply(ctx, node_names(ctx, machine_sets, once=True), remove_scale_down_protection, once=True)
