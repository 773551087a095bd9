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
do); ``taints_io.apply`` writes them to the target cluster. Node failures are logged and do not fail the
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
from collections.abc import Callable, Sequence
from typing import Any, Final

from mcm_tasks.api import MachineSet, Obj
from mcm_tasks.api.constants import (
    CA_SCALE_DOWN_DISABLED_ANNOTATION,
    CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION,
    CA_SCALE_DOWN_DISABLED_VALUE,
    PREFER_NO_SCHEDULE_KEY,
    PREFER_NO_SCHEDULE_TAINT_VALUE,
    TAINT_EFFECT_PREFER_NO_SCHEDULE,
)

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


def rollout_running(old_sets: Sequence[MachineSet]) -> bool:
    """Old sets still hold (or are about to hold) machines."""
    return any(ms.spec.replicas > 0 or ms.status.replicas > 0 for ms in old_sets)
