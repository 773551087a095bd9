"""What the machine controller watches, declared beside it: which updates of a Machine wake its own
reconcile. The informer's routing asks this; everything else a machine's update wakes (its set, its
class, the safety jobs) is declared by those controllers.

Status-only updates, mostly the echoes of the controller's own writes, wake nothing: upstream does
not reconcile on them either, and its requeue periods drive progress.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcm_tasks.api import ObjView
from mcm_tasks.api.constants import (
    DELETED_BY_FLOW_ANNOTATION,
    PRE_DRAIN_HOOK_PREFIX,
    PRE_TERMINATE_HOOK_PREFIX,
    PRESERVE_ANNOTATION,
)
from mcm_tasks.controllers.machine.descriptions import INITIATE_FINALIZER_REMOVAL, INITIATE_NODE_DELETION


def _meta(obj: ObjView | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def wakes_machine(old: ObjView | None, new: ObjView | None) -> bool:
    """An update of a Machine that its own reconcile must see: the spec changed (generation), the
    preserve annotation changed, a deletion started, or a lifecycle hook came or went (removing the
    last one resumes a held deletion at once)."""
    before, after = _meta(old), _meta(new)
    return (
        _hooks(before.get("annotations") or {}) != _hooks(after.get("annotations") or {})
        or before.get("generation") != after.get("generation")
        or (before.get("annotations") or {}).get(PRESERVE_ANNOTATION)
        != (after.get("annotations") or {}).get(PRESERVE_ANNOTATION)
        or bool(before.get("deletionTimestamp")) != bool(after.get("deletionTimestamp"))
        or _hooks(before.get("annotations") or {}) != _hooks(after.get("annotations") or {})
    )


def _hooks(annotations: Mapping[str, str]) -> dict[str, str]:
    """The lifecycle hook annotations (``deleting``'s prefixes)."""
    prefixes = (PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX)
    return {k: v for k, v in annotations.items() if k.startswith(prefixes)}


def _description(machine: ObjView | None) -> str:
    return str((((machine or {}).get("status") or {}).get("lastOperation") or {}).get("description") or "")


def _deleted_by_flow(obj: ObjView | None) -> bool:
    return DELETED_BY_FLOW_ANNOTATION in (_meta(obj).get("annotations") or {})


def deletes_its_node_itself(machine: ObjView | None, node: ObjView | None = None) -> bool:
    """The machine's deletion flow is at its own Node deletion or past it ("Initiate node object
    deletion", "Initiate machine object finalizer removal"), or marked the Node as it took its
    finalizer off (a pass that runs on writes its status only where it stops): the Node going away is
    the flow's doing, in a pass that goes on (or comes back on its own requeue), so the Node's DELETE
    need not wake the flow, nor the node task, whose only business with a deleting machine is none."""
    text = _description(machine)
    return INITIATE_NODE_DELETION in text or INITIATE_FINALIZER_REMOVAL in text or _deleted_by_flow(node)


def cleaned_up_after_itself(machine: ObjView | None) -> bool:
    """A Machine that disappeared after its deletion flow reached "Initiate machine object finalizer
    removal" was released by the flow, which had deleted its VM (or found none) and forgot the drain's
    progress on the way: its DELETE leaves nothing to the termination reconcile, nor to the orphan-VM
    sweep upstream runs on every Machine DELETE for a VM left behind. Any other disappearance (a
    finalizer removed by hand) still wakes both. The flow marks the Machine in the patch that takes
    its finalizer off, since a pass that runs on to it writes no status on the way."""
    return INITIATE_FINALIZER_REMOVAL in _description(machine) or _deleted_by_flow(machine)
