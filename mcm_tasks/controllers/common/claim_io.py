"""Claiming children: adopt selected orphans, release controlled children that are no longer selected
(Kubernetes' ControllerRefManager.Claim*, written against any kind).

The decisions are ``owners.claim_action``; this module only writes them. Each write carries the
child's resourceVersion; on a Conflict the child is read afresh from the API server and the decision
taken again, so a lagging cache never makes two owners fight over a child. Before the first adoption
of a pass, ``can_adopt`` re-reads the owner from the API server: an owner that is being deleted (or
was replaced by a namesake) must not adopt anything. The MachineDeployment controller reuses
``claim_children`` for its MachineSets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kubernetes.client import ApiClient

from mcm_tasks.api import K8sObject, LabelSelector
from mcm_tasks.controllers.common.owners import ClaimAction, adopt_patch, claim_action, release_patch
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe, is_conflict, is_invalid, is_not_found
from mcm_tasks.kube.resources import Resource

log = logging.getLogger(__name__)

T = TypeVar("T", bound=K8sObject)


class CannotAdopt(RuntimeError):
    """The owner may not adopt right now (it is being deleted, or it is not the object we read)."""


@dataclass
class ClaimOutcome(Generic[T]):
    #: the children the owner controls after this pass (adopted ones as the API server returned them)
    claimed: list[T] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)


def recheck_owner(api: ApiClient, res: Resource, owner: K8sObject) -> Callable[[], None]:
    """MCM's RecheckDeletionTimestamp: a quorum read of the owner before it adopts anything."""

    def check() -> None:
        fresh = ops.get(api, res, owner.metadata.name or "", owner.metadata.namespace, missing_ok=True)
        if fresh is None:
            raise CannotAdopt(f"{res.kind} {owner.key} is gone")
        meta = fresh.get("metadata") or {}
        if meta.get("uid") != owner.metadata.uid:
            raise CannotAdopt(f"{res.kind} {owner.key} was replaced (uid {meta.get('uid')})")
        if meta.get("deletionTimestamp"):
            raise CannotAdopt(f"{res.kind} {owner.key} is being deleted")

    return check


def claim_children(
    api: ApiClient,
    res: Resource,
    model: type[T],
    owner: K8sObject,
    selector: LabelSelector | None,
    children: Iterable[T],
    can_adopt: Callable[[], None],
    decide: Callable[[T], ClaimAction] | None = None,
) -> ClaimOutcome[T]:
    """Keep, adopt or release each child; errors are collected, not raised (the caller decides).
    ``decide``: ``owners.claim_action`` of a child for this owner and selector, when the caller
    knows it already (the MachineSet's per-version facts); a write decides again on what it reads.

    Upstream: ``claimMachines``, ``MachineControllerRefManager.ClaimMachines``.
    """
    out: ClaimOutcome[T] = ClaimOutcome()
    adoption_checked: Exception | bool | None = False
    for child in children:
        if decide is not None:
            action = decide(child)
        else:
            action = claim_action(child.metadata, owner.metadata, selector)
        if action is ClaimAction.KEEP:
            out.claimed.append(child)
        elif action is ClaimAction.ADOPT:
            if adoption_checked is False:
                adoption_checked = _try(can_adopt)
                if isinstance(adoption_checked, Exception):
                    out.errors.append(adoption_checked)
            if adoption_checked is None:
                _write(api, res, model, owner, selector, child, ClaimAction.ADOPT, out)
        elif action is ClaimAction.RELEASE:
            _write(api, res, model, owner, selector, child, ClaimAction.RELEASE, out)
    return out


def _try(fn: Callable[[], None]) -> Exception | None:
    try:
        fn()
    except Exception as err:
        return err
    return None


def _write(
    api: ApiClient,
    res: Resource,
    model: type[T],
    owner: K8sObject,
    selector: LabelSelector | None,
    child: T,
    wanted: ClaimAction,
    out: ClaimOutcome[T],
) -> None:
    """Adopt or release one child; on a Conflict, decide again on a fresh read of it."""
    current: list[T] = [child]
    done: list[bool] = [False]

    def attempt() -> T | None:
        obj = current[0]
        action = claim_action(obj.metadata, owner.metadata, selector)
        if action is ClaimAction.KEEP:
            return obj
        if action is not wanted:
            return None
        name, namespace = obj.metadata.name or "", obj.metadata.namespace
        if wanted is ClaimAction.ADOPT:
            body = adopt_patch(obj, owner)
        else:
            body = release_patch(obj, owner.metadata.uid or "")
        try:
            written = model.model_validate(ops.patch(api, res, name, body, namespace))
        except Exception as err:
            if is_conflict(err):
                fresh = ops.get(api, res, name, namespace)
                current[0] = model.model_validate(fresh)
            raise
        done[0] = True
        return written if wanted is ClaimAction.ADOPT else None

    try:
        result = ops.retry_on_conflict(attempt)
    except Exception as err:
        if is_not_found(err) or (wanted is ClaimAction.RELEASE and is_invalid(err)):
            return
        log.warning("%s %s: could not %s %s %s: %s",
                    owner.kind, owner.key, wanted, res.kind, child.key, describe(err))  # fmt: skip
        out.errors.append(err)
        return
    if result is not None:
        out.claimed.append(result)
    if done[0]:
        (out.adopted if wanted is ClaimAction.ADOPT else out.released).append(child.metadata.name or "")
