"""Owner references and selectors: who controls an object, and whether an owner should adopt, keep
or release it (Kubernetes' ControllerRefManager, as pure decisions).

Both the MachineSet controller (claiming Machines) and the MachineDeployment controller (claiming
MachineSets) decide here and write elsewhere. The patches returned carry the child's
``resourceVersion``, so an adoption or release based on a stale cache fails with a Conflict instead
of overwriting an owner someone else set meanwhile.

A missing or empty selector selects nothing: an owner with such a selector adopts no orphan and
releases nothing it already controls (Kubernetes would make an empty selector select everything;
MCM's own event handlers already treat it as selecting nothing, so that is the rule everywhere here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from mcm_tasks.api import K8sObject, LabelSelector, ObjectMeta, OwnerReference, dump, new_controller_ref


class ClaimAction(StrEnum):
    #: controlled by the owner and selected: it stays the owner's
    KEEP = "keep"
    #: an orphan the owner selects: take it (after re-checking the owner is not being deleted)
    ADOPT = "adopt"
    #: controlled by the owner but no longer selected: drop the owner reference
    RELEASE = "release"
    #: someone else's, or nothing to do with the owner
    IGNORE = "ignore"


def selects(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Whether a selector picks these labels; a missing or empty one picks nothing."""
    if selector is None or selector.is_empty:
        return False
    return selector.matches(labels)


def controller_uid(meta: ObjectMeta) -> str | None:
    ref = meta.controller_ref()
    return ref.uid if ref is not None else None


def is_controlled_by(child: ObjectMeta, owner: ObjectMeta) -> bool:
    return bool(owner.uid) and controller_uid(child) == owner.uid


def claim_action(child: ObjectMeta, owner: ObjectMeta, selector: LabelSelector | None) -> ClaimAction:
    """ControllerRefManager.ClaimObject's decision for one child."""
    ref = child.controller_ref()
    if ref is not None:
        if ref.uid != owner.uid:
            return ClaimAction.IGNORE
        if selector is None or selector.is_empty or selector.matches(child.labels):
            return ClaimAction.KEEP
        # an owner being deleted keeps what it has, so that its deletion can clean it up
        return ClaimAction.IGNORE if owner.is_deleting else ClaimAction.RELEASE
    if owner.is_deleting or child.is_deleting or not selects(selector, child.labels):
        return ClaimAction.IGNORE
    return ClaimAction.ADOPT


def adopt_patch(child: K8sObject, owner: K8sObject) -> dict[str, Any]:
    """A merge patch that makes ``owner`` the child's controller, keeping its other owners."""
    others = [r for r in child.metadata.owner_references if r.uid != owner.metadata.uid]
    refs = [*others, new_controller_ref(owner)]
    return _owner_refs_patch(child, refs)


def release_patch(child: K8sObject, owner_uid: str) -> dict[str, Any]:
    """A merge patch that removes the owner's reference from the child."""
    refs = [r for r in child.metadata.owner_references if r.uid != owner_uid]
    return _owner_refs_patch(child, refs)


def _owner_refs_patch(child: K8sObject, refs: Sequence[OwnerReference]) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "ownerReferences": [dump(r) for r in refs] or None,
        "uid": child.metadata.uid,
    }
    if child.metadata.resource_version:
        metadata["resourceVersion"] = child.metadata.resource_version
    return {"metadata": metadata}
