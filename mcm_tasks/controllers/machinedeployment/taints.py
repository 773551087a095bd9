"""What a rollout does to Nodes: the PreferNoSchedule taint on old machines' nodes, and the
cluster-autoscaler's scale-down protection while the rollout runs.

- ``deployment.machine.sapcloud.io/prefer-no-schedule=True:PreferNoSchedule`` goes on the nodes of
  old sets, so the scheduler prefers the new machines for pods that move. A set carrying the
  annotation of the same key has had its nodes tainted (so this is done once per set); the taint
  and the annotation come off the nodes of a set that becomes new again (rollback) or is new when a
  rollout completes.
- ``cluster-autoscaler.kubernetes.io/scale-down-disabled=true`` with its marker
  ``…-by-mcm=true`` goes on the nodes of all sets while old sets still have machines (behind the
  ``autoscaler_scaledown_annotation_during_rollout`` flag), so the autoscaler does not remove nodes
  the rollout is counting on; both come off when the rollout completes, only where the marker says
  MCM put them. Deliberate difference: a node whose scale-down-disabled annotation was set by
  someone else (no marker) is left alone, so MCM never removes a user's protection.

Decisions are pure functions over a Node dict returning the merge patch to send (None: nothing to
do); ``apply`` writes them to the target cluster. Node failures are logged and do not fail the
rollout, as in MCM (tainting is a scheduling preference, not a safety property).

A rollout's passes re-check the protection of every node of the deployment, as upstream does; a
process remembers (``seen``) which node each machine joined as and which nodes it found protected,
per deployment generation, and reads again only the others, and all of them once that is older than
ShortRetry: a pass reads the machines and nodes that joined since, not all of them. A mark taken off
by hand comes back within ShortRetry (upstream: at the deployment's next pass, which a node's update
does not trigger).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.api import MachineSet, Obj
from mcm_tasks.api.constants import (
    CA_SCALE_DOWN_DISABLED_ANNOTATION,
    CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION,
    CA_SCALE_DOWN_DISABLED_VALUE,
    NODE_LABEL_KEY,
    PREFER_NO_SCHEDULE_KEY,
    PREFER_NO_SCHEDULE_TAINT_VALUE,
    TAINT_EFFECT_PREFER_NO_SCHEDULE,
)
from mcm_tasks.controllers.machinedeployment.control import Context
from mcm_tasks.controllers.machinedeployment.seen import PROTECTED_NODES
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe, is_conflict, is_not_found

log = logging.getLogger(__name__)

#: a decision over a node: the merge patch to send, or None
NodeChange = Callable[[Obj], dict[str, Any] | None]

PREFER_NO_SCHEDULE_TAINT: Final = {
    "key": PREFER_NO_SCHEDULE_KEY,
    "value": PREFER_NO_SCHEDULE_TAINT_VALUE,
    "effect": TAINT_EFFECT_PREFER_NO_SCHEDULE,
}


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _taints(node: Obj) -> list[Obj]:
    spec = node.get("spec")
    taints = spec.get("taints") if isinstance(spec, dict) else None
    return list(taints) if isinstance(taints, list) else []


def _is_ours(taint: Obj) -> bool:
    return (
        taint.get("key") == PREFER_NO_SCHEDULE_KEY and taint.get("effect") == TAINT_EFFECT_PREFER_NO_SCHEDULE
    )


def _taints_patch(node: Obj, taints: list[Obj]) -> dict[str, Any]:
    """Taints are a list (replaced whole by a merge patch): guard it with the node's resourceVersion."""
    return {
        "metadata": {"resourceVersion": _meta(node).get("resourceVersion")},
        "spec": {"taints": taints or None},
    }


def add_prefer_no_schedule(node: Obj) -> dict[str, Any] | None:
    taints = _taints(node)
    if any(_is_ours(t) and t.get("value") == PREFER_NO_SCHEDULE_TAINT_VALUE for t in taints):
        return None
    kept = [t for t in taints if not _is_ours(t)]
    return _taints_patch(node, [*kept, dict(PREFER_NO_SCHEDULE_TAINT)])


def remove_prefer_no_schedule(node: Obj) -> dict[str, Any] | None:
    taints = _taints(node)
    kept = [t for t in taints if not _is_ours(t)]
    return None if len(kept) == len(taints) else _taints_patch(node, kept)


def add_scale_down_protection(node: Obj) -> dict[str, Any] | None:
    annotations = _meta(node).get("annotations") or {}
    if annotations.get(CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION) == CA_SCALE_DOWN_DISABLED_VALUE:
        return None
    if CA_SCALE_DOWN_DISABLED_ANNOTATION in annotations:
        # someone else's protection: leave it (and its removal) to them
        return None
    value = CA_SCALE_DOWN_DISABLED_VALUE
    return {"metadata": {"annotations": {CA_SCALE_DOWN_DISABLED_ANNOTATION: value,
                                         CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION: value}}}  # fmt: skip


def remove_scale_down_protection(node: Obj) -> dict[str, Any] | None:
    annotations = _meta(node).get("annotations") or {}
    if CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION not in annotations:
        return None
    return {"metadata": {"annotations": {CA_SCALE_DOWN_DISABLED_ANNOTATION: None,
                                         CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION: None}}}  # fmt: skip


def combined(*changes: NodeChange) -> NodeChange:
    """The decisions as one merge patch of the node (one write instead of one each)."""

    def change(node: Obj) -> dict[str, Any] | None:
        out: dict[str, Any] | None = None
        for patch in (c(node) for c in changes):
            if patch is not None:
                out = _merged(out or {}, patch)
        return out

    return change


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        both = isinstance(out.get(key), dict) and isinstance(value, dict)
        out[key] = _merged(out[key], value) if both else value
    return out


# --- I/O -------------------------------------------------------------------------------------------------


def node_names(ctx: Context, machine_sets: Iterable[MachineSet]) -> list[str]:
    """Nodes of the sets' machines (the machines' ``node`` label), each once."""
    names: dict[str, None] = {}
    for ms in machine_sets:
        for machine in ctx.machines_of(ms, lag_ok=True):
            node = (_meta(machine).get("labels") or {}).get(NODE_LABEL_KEY)
            if node:
                names[node] = None
    return list(names)


def apply(ctx: Context, nodes: Sequence[str], change: NodeChange) -> int:
    """Apply a decision to each node (re-deciding on a fresh read after a Conflict); the nodes
    changed. Errors are logged, not raised."""
    return _apply(ctx, nodes, change)[0]


def _apply(ctx: Context, nodes: Sequence[str], change: NodeChange) -> tuple[int, list[str]]:
    """``apply``, and the nodes that now need no change (none failed to take it)."""
    if ctx.target is None:
        return 0, []
    changed, settled = 0, []
    for name, node in ctx.get_nodes(nodes, lag_ok=True).items():
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
    """Upstream ``removeAutoscalerAnnotationsIfRequired``: only where the ``…-by-mcm`` marker is."""
    if ctx.settings.autoscaler_scaledown_annotation_during_rollout:
        uid = _rollout(ctx)[0]
        PROTECTED_NODES.forget_where(lambda k: k[0] == uid)
        apply(ctx, node_names(ctx, machine_sets), remove_scale_down_protection)


def rollout_running(old_sets: Sequence[MachineSet]) -> bool:
    """Old sets still hold (or are about to hold) machines."""
    return any(ms.spec.replicas > 0 or ms.status.replicas > 0 for ms in old_sets)
