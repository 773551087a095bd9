"""A drain round as pure functions: which pods the drain tracks, which removals are due now, and whether
the drain is over.

A drain never waits inside a worker. Each reconcile of the "Initiate node drain" step

1. lists the node's pods and brings the progress up to date (``track``, then ``observe_all``: gone
   pods done, volumes detached, timeouts);
2. issues the removals that are due (``due_removals``, called again after each answer): every pod
   without volumes at once (MCM's parallel eviction), and the pods with volumes one at a time in
   priority order — the next one only once the previous one's volumes left the node;
3. ``conclude``: over when every tracked pod is done or failed (and, for a normal drain, the detach
   barrier holds), else the seconds until something may change (``Conclusion.wake_in``), which the
   reconcile returns as its requeue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mcm_tasks.api import ObjView
from mcm_tasks.controllers.machine.drain import pods as dp
from mcm_tasks.controllers.machine.drain import select as ds
from mcm_tasks.controllers.machine.drain import volumes as dv
from mcm_tasks.controllers.machine.drain.force import DrainParams
from mcm_tasks.controllers.machine.drain.state_io import DrainProgress, PodProgress


@dataclass(frozen=True)
class VolumeInfo:
    """A pod's tracked volumes: PV names and the Driver's volume IDs (shared PVs left out)."""

    pv_names: tuple[str, ...] = ()
    volume_ids: tuple[str, ...] = ()


def track(
    progress: DrainProgress, selected: Sequence[ObjView], volumes: Mapping[str, VolumeInfo]
) -> DrainProgress:
    """Records for pods seen for the first time (or replaced by a namesake with another uid)."""
    pods = dict(progress.pods)
    for pod in selected:
        key, uid = ds.pod_key(pod), ds.pod_uid(pod)
        known = pods.get(key)
        if known is not None and known.uid == uid:
            continue
        info = volumes.get(key, VolumeInfo())
        pods[key] = PodProgress(
            uid=uid,
            volumes=ds.has_volumes(pod),
            grace=ds.grace_period_of(pod),
            pv_names=list(info.pv_names),
            volume_ids=list(info.volume_ids),
        )
    return progress.model_copy(update={"pods": pods})


def untracked(progress: DrainProgress, selected: Sequence[ObjView]) -> list[ObjView]:
    """Selected pods with volumes that ``track`` would add (their volume info must be looked up)."""
    out = []
    for pod in selected:
        known = progress.pods.get(ds.pod_key(pod))
        if ds.has_volumes(pod) and (known is None or known.uid != ds.pod_uid(pod)):
            out.append(pod)
    return out


def current(pods_by_key: Mapping[str, ObjView], key: str, record: PodProgress) -> ObjView | None:
    """The pod a record is about, if it still exists (same uid)."""
    pod = pods_by_key.get(key)
    return pod if pod is not None and ds.pod_uid(pod) == record.uid else None


def observe_all(
    progress: DrainProgress,
    pods_by_key: Mapping[str, ObjView],
    node: ObjView | None,
    volume_attachments: Sequence[ObjView],
    params: DrainParams,
    timing: dp.Timing,
    now: float,
) -> DrainProgress:
    pods = {
        key: dp.observe(
            record,
            current(pods_by_key, key, record),
            node,
            volume_attachments,
            progress.node,
            params,
            timing,
            now,
        )
        for key, record in progress.pods.items()
    }
    return progress.model_copy(update={"pods": pods})


def serial(record: PodProgress, node: ObjView | None, params: DrainParams) -> bool:
    """Whether the pod waits its turn in the one-at-a-time lane (volumes, on a node that exists,
    in a normal drain).

    Upstream: ``evictPodsWithPv``, ``evictPodsWithPVInternal``.
    """
    return record.volumes and node is not None and not params.force


def lane_busy(progress: DrainProgress) -> bool:
    return any(record.in_flight for record in progress.pods.values())


def due_removals(
    progress: DrainProgress,
    pods_by_key: Mapping[str, ObjView],
    node: ObjView | None,
    params: DrainParams,
    now: float,
) -> list[tuple[str, dp.Removal]]:
    """(pod key, removal) to issue now: every due parallel pod, plus at most one serial pod when the
    lane is free (the highest priority among the due ones).

    Upstream: ``deleteOrEvictPods``, ``deleteOrEvictPodsSimple``, ``evictPodsWithoutPv``,
    ``evictPodWithoutPVInternal``.
    """
    out: list[tuple[str, dp.Removal]] = []
    serial_candidates: list[ObjView] = []
    for key, record in sorted(progress.pods.items()):
        pod = current(pods_by_key, key, record)
        if pod is None or not dp.is_due(record, now):
            continue
        if serial(record, node, params):
            serial_candidates.append(pod)
        else:
            out.append((key, dp.removal_for(record, params)))
    if serial_candidates and not lane_busy(progress):
        key = ds.pod_key(ds.by_priority(serial_candidates)[0])
        out.append((key, dp.removal_for(progress.pods[key], params)))
    return out


@dataclass
class Conclusion:
    #: the drain is over (successfully unless ``errors``)
    done: bool
    errors: list[str] = field(default_factory=list)
    #: warnings worth an Event (reattach timeouts, a barrier given up on)
    warnings: list[str] = field(default_factory=list)
    #: when not done: seconds until the next look
    wake_in: float = 0.0
    #: the detach barrier's start, to keep in the progress
    barrier_since: float | None = None


def _wake(
    progress: DrainProgress,
    node: ObjView | None,
    params: DrainParams,
    timing: dp.Timing,
    poll: float,
    now: float,
) -> float:
    busy = lane_busy(progress)
    waits = []
    for record in progress.pods.values():
        if busy and serial(record, node, params) and record.removed_at is None:
            continue  # behind the pod in flight, which has its own wake
        found = dp.wake_in(record, params, timing, poll, now)
        if found is not None:
            waits.append(found)
    return min(waits) if waits else poll


def conclude(
    progress: DrainProgress,
    node: ObjView | None,
    volume_attachments: Sequence[ObjView],
    pvs_in_use: Sequence[str],
    params: DrainParams,
    timing: dp.Timing,
    poll: float,
    now: float,
) -> Conclusion:
    """``pvs_in_use``: PV names mounted by the pods the drain leaves on the node (DaemonSet, mirror)."""
    if any(not r.resolved for r in progress.pods.values()):
        return Conclusion(False, wake_in=_wake(progress, node, params, timing, poll, now))
    warnings = sorted({r.warning for r in progress.pods.values() if r.warning})
    errors = [progress.pods[k].error for k in sorted(progress.pods) if progress.pods[k].error]
    if errors or params.force or node is None:
        return Conclusion(True, errors=errors, warnings=warnings)
    left = dv.detach_barrier(progress.node, volume_attachments, pvs_in_use)
    if not left:
        return Conclusion(True, warnings=warnings)
    since = progress.barrier_since if progress.barrier_since is not None else now
    if now - since > timing.detach_timeout:
        warnings.append(
            f"VolumeAttachments still on node after {timing.detach_timeout:g}s: {', '.join(left)}"
        )
        return Conclusion(True, warnings=warnings, barrier_since=since)
    return Conclusion(
        False, wake_in=min(poll, max(0.0, since + timing.detach_timeout - now) + 0.001), barrier_since=since
    )
