"""One pod's drain, as pure rules over its ``PodProgress``: evict or delete, what an answer of the API
server means next, and what the passing of time and the node's volumes say about a pod already on
its way out.

Eviction answers, as upstream treats them:

- accepted: the pod is on its way; a pod without volumes is then waited for until it is gone (at most
  min(grace, drain timeout) + 30 s), a pod with volumes until they detach (grace +
  ``--machine-pv-detach-timeout``) and come up elsewhere (``--machine-pv-reattach-timeout``, only a
  warning when it does not);
- 404: the pod is already gone, done;
- 429 (a PodDisruptionBudget says no): retried every ``pod_eviction_retry_interval``; after
  ``maxEvictRetries`` refusals the pod is deleted instead. A *misconfigured* budget (one that can never
  allow a disruption: observed, all expected pods healthy, none being disrupted, zero allowed) fails
  the pod at once rather than retrying for the whole drain timeout;
- anything else: fails a pod without volumes at once, and is retried like a 429 for a pod with volumes.

In a forced drain every pod is deleted with no grace and nothing is waited for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from mcm_tasks.api import LabelSelector, ObjView
from mcm_tasks.controllers.machine.drain import volumes as dv
from mcm_tasks.controllers.machine.drain.force import DrainParams
from mcm_tasks.controllers.machine.drain.state_io import PodProgress

#: upstream's bufferPeriod on top of a pod's grace while waiting for it to disappear
TERMINATION_BUFFER: Final = 30.0
REATTACH_TIMEOUT_WARNING: Final = "Timeout occurred while waiting for PV to reattach to a different node"


class Removal(StrEnum):
    EVICT = "evict"
    DELETE = "delete"


class Answer(StrEnum):
    OK = "ok"
    NOT_FOUND = "not-found"
    TOO_MANY_REQUESTS = "too-many-requests"
    ERROR = "error"


@dataclass(frozen=True)
class Reply:
    """What the API server said to one eviction or deletion."""

    answer: Answer
    message: str = ""


@dataclass(frozen=True)
class Timing:
    """The settings the per-pod rules need, so they stay free of the settings object."""

    retry_interval: float
    detach_timeout: float
    reattach_timeout: float


# --- PodDisruptionBudgets ------------------------------------------------------------------------------


def pdb_selects(pdb: ObjView, pod: ObjView) -> bool:
    """policy/v1: same namespace and the selector matches; a missing selector selects nothing, an
    empty one everything."""
    pdb_meta, pod_meta = pdb.get("metadata") or {}, pod.get("metadata") or {}
    if pdb_meta.get("namespace") != pod_meta.get("namespace"):
        return False
    raw = (pdb.get("spec") or {}).get("selector")
    if raw is None:
        return False
    try:
        return LabelSelector.model_validate(raw).matches(pod_meta.get("labels") or {})
    except ValueError:
        return False


def pdb_for_pod(pdbs: Iterable[ObjView], pod: ObjView) -> ObjView | None:
    """The budget that refused the pod; with several, the first by name (upstream: an arbitrary one)."""
    matching = sorted((p for p in pdbs if pdb_selects(p, pod)), key=lambda p: str(p["metadata"]["name"]))
    return matching[0] if matching else None


def is_misconfigured_pdb(pdb: ObjView) -> bool:
    """Upstream: ``isMisconfiguredPdbV1``."""
    generation = (pdb.get("metadata") or {}).get("generation")
    status = pdb.get("status") or {}
    if generation != status.get("observedGeneration"):
        return False
    expected = int(status.get("expectedPods") or 0)
    healthy = int(status.get("currentHealthy") or 0)
    return (
        expected > 0
        and healthy >= expected
        and not status.get("disruptedPods")
        and int(status.get("disruptionsAllowed") or 0) == 0
    )


def misconfigured_message(pod_name: str, pdb: ObjView) -> str:
    meta = pdb.get("metadata") or {}
    return (
        f'error while evicting pod "{pod_name}": pod disruption budget '
        f"{meta.get('namespace')}/{meta.get('name')} is misconfigured and requires zero voluntary evictions"
    )


# --- removal --------------------------------------------------------------------------------------------


def removal_for(progress: PodProgress, params: DrainParams) -> Removal:
    if params.force or progress.attempts >= params.max_evict_retries:
        return Removal.DELETE
    return Removal.EVICT


def is_due(progress: PodProgress, now: float) -> bool:
    return not progress.resolved and progress.removed_at is None and progress.next_attempt_at <= now


def after_reply(
    progress: PodProgress,
    pod: ObjView,
    removal: Removal,
    reply: Reply,
    pdb: ObjView | None,
    params: DrainParams,
    timing: Timing,
    now: float,
) -> PodProgress:
    """The pod's progress once the API server answered ``removal``."""
    name = str((pod.get("metadata") or {}).get("name") or "")
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    if reply.answer is Answer.NOT_FOUND:
        return progress.model_copy(update={"done": True})
    if reply.answer is Answer.OK:
        if params.force:
            return progress.model_copy(update={"done": True, "removed_at": now, "deleted": True})
        return progress.model_copy(update={"removed_at": now, "deleted": removal is Removal.DELETE})
    refused = removal is Removal.EVICT and reply.answer is Answer.TOO_MANY_REQUESTS
    if refused and pdb is not None and is_misconfigured_pdb(pdb):
        return progress.model_copy(update={"error": misconfigured_message(name, pdb)})
    if refused or (removal is Removal.EVICT and progress.volumes and not params.force):
        return progress.model_copy(
            update={"attempts": progress.attempts + 1, "next_attempt_at": now + timing.retry_interval}
        )
    verb = "deleting" if removal is Removal.DELETE else "evicting"
    return progress.model_copy(
        update={"error": f'error when {verb} pod "{name}": {reply.message} scheduled on node {node}'}
    )


# --- waiting --------------------------------------------------------------------------------------------


def termination_deadline(progress: PodProgress, params: DrainParams) -> float | None:
    """Upstream: ``waitForDelete``."""
    if progress.removed_at is None:
        return None
    return progress.removed_at + min(progress.grace, params.timeout) + TERMINATION_BUFFER


def observe(
    progress: PodProgress,
    pod: ObjView | None,
    node: ObjView | None,
    volume_attachments: Sequence[ObjView],
    node_name: str,
    params: DrainParams,
    timing: Timing,
    now: float,
) -> PodProgress:
    """The pod's progress given what is seen now: ``pod`` is None when it is gone (or replaced by a
    namesake); ``node`` None when the Node is gone."""
    if progress.resolved:
        return progress
    if progress.volumes and node is None:
        # the node is gone: nothing is left to detach from, so an evicted pod is drained (upstream)
        if pod is None or progress.removed_at is not None:
            return progress.model_copy(update={"done": True})
        return progress
    if not progress.volumes:
        if pod is None:
            return progress.model_copy(update={"done": True})
        deadline = termination_deadline(progress, params)
        if deadline is not None and now > deadline:
            name = str((pod.get("metadata") or {}).get("name") or "")
            message = (
                f'timeout expired while waiting for pod "{name}" terminating scheduled on node {node_name}'
            )
            return progress.model_copy(update={"error": message})
        return progress
    if progress.removed_at is None:
        return progress.model_copy(update={"done": True}) if pod is None else progress
    if progress.detached_at is None:
        state = dv.detach_state(progress.volume_ids, node)
        if state is dv.Detach.ATTACHED:
            deadline = dv.detach_deadline(progress.removed_at, progress.grace, timing.detach_timeout)
            if now > deadline:
                return progress.model_copy(
                    update={"error": "timeout while waiting for PVs to detach from node"}
                )
            return progress
        progress = progress.model_copy(update={"detached_at": now})
    assert progress.detached_at is not None
    if dv.reattached(progress.pv_names, volume_attachments, node_name):
        return progress.model_copy(update={"done": True})
    if now > dv.reattach_deadline(progress.detached_at, timing.reattach_timeout):
        return progress.model_copy(update={"done": True, "warning": REATTACH_TIMEOUT_WARNING})
    return progress


def wake_in(
    progress: PodProgress, params: DrainParams, timing: Timing, poll: float, now: float
) -> float | None:
    """Seconds until something can change for this pod without an event (None: nothing to wait for)."""
    if progress.resolved:
        return None
    if progress.removed_at is None:
        return max(0.0, progress.next_attempt_at - now)
    if progress.volumes:
        if progress.detached_at is None:
            deadline = dv.detach_deadline(progress.removed_at, progress.grace, timing.detach_timeout)
        else:
            deadline = dv.reattach_deadline(progress.detached_at, timing.reattach_timeout)
    else:
        deadline = termination_deadline(progress, params) or now
    return max(0.0, min(poll, deadline - now + 0.001))
