"""Volume decisions of a drain, over API dicts: has a drained pod's volume left the node, has it come up
on another, and may the drain end (the detach barrier).

Detach: a volume is detached once its ID (the Driver's ``GetVolumeIDs`` of the PersistentVolume) no
longer appears in any ``node.status.volumesAttached`` name — names look like
``kubernetes.io/csi/<driver>^<handle>``, so the ID is searched inside them, as upstream does. A Node
that is gone has nothing attached, and upstream then counts every pod still waiting as drained.

Reattach: each of the pod's PersistentVolumes has an attached VolumeAttachment on another node.
Upstream listens to VolumeAttachment events for this; here the current VolumeAttachments are read at
each reconcile, which sees the same end state without a channel per pod.

Volumes shared by several drained pods are not tracked for any of them (upstream's
``filterSharedPVs``): one pod leaving cannot detach a volume another still mounts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from mcm_tasks.api import ObjView


class Detach(StrEnum):
    ATTACHED = "attached"
    DETACHED = "detached"
    NODE_GONE = "node-gone"


def attached_names(node: ObjView | None) -> list[str]:
    return [str(v.get("name") or "") for v in ((node or {}).get("status") or {}).get("volumesAttached") or ()]


def detach_state(volume_ids: Iterable[str], node: ObjView | None) -> Detach:
    """Upstream: ``waitForDetach``."""
    if node is None:
        return Detach.NODE_GONE
    names = attached_names(node)
    for volume_id in volume_ids:
        if volume_id and any(volume_id in name for name in names):
            return Detach.ATTACHED
    return Detach.DETACHED


def va_pv_name(va: ObjView) -> str:
    return str(((va.get("spec") or {}).get("source") or {}).get("persistentVolumeName") or "")


def va_node_name(va: ObjView) -> str:
    return str((va.get("spec") or {}).get("nodeName") or "")


def va_is_live(va: ObjView) -> bool:
    """Not being deleted (MCM's ``getLiveVolumeAttachmentsForNode``)."""
    return not (va.get("metadata") or {}).get("deletionTimestamp")


def reattached(pv_names: Iterable[str], volume_attachments: Iterable[ObjView], old_node: str) -> bool:
    """Every PV is attached on a node other than ``old_node`` (vacuously true for no PVs).

    Upstream: ``waitForReattach``.
    """
    elsewhere = {
        va_pv_name(va)
        for va in volume_attachments
        if (va.get("status") or {}).get("attached") is True and va_node_name(va) != old_node
    }
    return all(pv in elsewhere for pv in pv_names)


def shared_pv_names(pv_names_by_pod: Mapping[str, Iterable[str]]) -> set[str]:
    """PV names mounted by more than one of the given pods."""
    seen: set[str] = set()
    shared: set[str] = set()
    for names in pv_names_by_pod.values():
        for name in set(names):
            (shared if name in seen else seen).add(name)
    return shared


def live_attachments_on(node_name: str, volume_attachments: Iterable[ObjView]) -> list[ObjView]:
    return [va for va in volume_attachments if va_node_name(va) == node_name and va_is_live(va)]


def detach_barrier(
    node_name: str, volume_attachments: Iterable[ObjView], pvs_in_use: Iterable[str]
) -> list[str]:
    """Names of live VolumeAttachments on the node whose PV no pod left on it uses: volumes of drained
    pods still on their way off. Empty means a normal drain may report success."""
    in_use = set(pvs_in_use)
    return sorted(
        str((va.get("metadata") or {}).get("name") or "")
        for va in live_attachments_on(node_name, volume_attachments)
        if va_pv_name(va) not in in_use
    )


def detach_deadline(removed_at: float, grace: float, detach_timeout: float) -> float:
    """Upstream: the pod's termination grace plus ``--machine-pv-detach-timeout`` after its eviction."""
    return removed_at + grace + detach_timeout


def reattach_deadline(detached_at: float, reattach_timeout: float) -> float:
    return detached_at + reattach_timeout
