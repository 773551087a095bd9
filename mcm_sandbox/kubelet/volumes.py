"""Attach/detach planning for the kubelet simulator: pure, one plan per node per tick.

A volume is attached where a pod on a live node uses it, unless it is still attached to another
node, by a VolumeAttachment or in that Node's ``status.volumesAttached`` (the other node must
detach first, as for a ReadWriteOnce disk). It is detached ``delay``
seconds after nothing on the node uses it any more, or its node's VM is gone, or the Node itself
is gone (its VolumeAttachments are then cleaned up). The "unused since" clock is the one piece of
state carried between ticks; the caller owns the dict and passes it in each time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcm_sandbox.kubelet import pods as kp


@dataclass
class VolumePlan:
    node: str
    #: VolumeAttachment manifests to create (then mark attached)
    create: list[dict[str, Any]] = field(default_factory=list)
    #: names of VolumeAttachments whose ``status.attached`` must become true
    mark_attached: list[str] = field(default_factory=list)
    #: names of VolumeAttachments to delete
    delete: list[str] = field(default_factory=list)
    #: the node's new ``status.volumesAttached``; None when unchanged (or the Node is gone)
    volumes_attached: list[dict[str, str]] | None = None

    def empty(self) -> bool:
        return not (self.create or self.mark_attached or self.delete) and self.volumes_attached is None


def _va_pv(va: dict[str, Any]) -> str:
    return str(((va.get("spec") or {}).get("source") or {}).get("persistentVolumeName") or "")


def _va_node(va: dict[str, Any]) -> str:
    return str((va.get("spec") or {}).get("nodeName") or "")


def _va_name(va: dict[str, Any]) -> str:
    return str((va.get("metadata") or {}).get("name") or "")


def wanted_volumes(
    pods: list[dict[str, Any]],
    pvcs: dict[tuple[str, str], dict[str, Any]],
    pvs: dict[str, dict[str, Any]],
    live: Callable[[str], bool],
) -> dict[str, dict[str, kp.CsiVolume]]:
    """node → pv name → volume, for pods (terminating ones too: they still mount) on live nodes."""
    out: dict[str, dict[str, kp.CsiVolume]] = {}
    for pod in pods:
        node = kp.node_of(pod)
        if not node or kp.is_finished(pod) or not live(node):
            continue
        for vol in kp.pod_volumes(pod, pvcs, pvs):
            out.setdefault(node, {})[vol.pv_name] = vol
    return out


def _due(unused_since: dict[tuple[str, str], float], seen: set[tuple[str, str]], key: tuple[str, str],
         now: float, delay: float) -> bool:  # fmt: skip
    seen.add(key)
    return now - unused_since.setdefault(key, now) >= delay


def plan_volumes(
    nodes: dict[str, dict[str, Any]],
    pods: list[dict[str, Any]],
    pvcs: dict[tuple[str, str], dict[str, Any]],
    pvs: dict[str, dict[str, Any]],
    vas: list[dict[str, Any]],
    live: Callable[[str], bool],
    unused_since: dict[tuple[str, str], float],
    now: float,
    delay: float,
) -> list[VolumePlan]:
    wanted = wanted_volumes(pods, pvcs, pvs, live)
    vas_by_node: dict[str, dict[str, dict[str, Any]]] = {}
    nodes_of_pv: dict[str, set[str]] = {}
    for va in vas:
        vas_by_node.setdefault(_va_node(va), {})[_va_pv(va)] = va
        nodes_of_pv.setdefault(_va_pv(va), set()).add(_va_node(va))
    # A node's status lists what is attached to it; the simulator's watches of Nodes and of
    # VolumeAttachments arrive in any order, and a pod ran on the strength of its node's list, so
    # that list counts as "attached elsewhere" too (the VolumeAttachment may not be seen yet).
    listed_on: dict[str, set[str]] = {}
    for node_name, listed in nodes.items():
        for entry in ((listed or {}).get("status") or {}).get("volumesAttached") or []:
            listed_on.setdefault(str(entry.get("name")), set()).add(node_name)
    seen: set[tuple[str, str]] = set()
    plans = []
    for name in sorted(set(nodes) | set(vas_by_node)):
        node = nodes.get(name)
        entries = list(((node or {}).get("status") or {}).get("volumesAttached") or [])
        node_vas = vas_by_node.get(name, {})
        node_wants = wanted.get(name, {})
        if not (entries or node_vas or node_wants):
            continue
        plan = VolumePlan(name)
        new_entries = {str(e.get("name")): e for e in entries}
        for pv, vol in sorted(node_wants.items()):
            if (nodes_of_pv.get(pv, set()) | listed_on.get(vol.attached_name, set())) - {name}:
                continue  # still attached elsewhere: wait for that node to detach it
            current = node_vas.get(pv)
            if current is None:
                plan.create.append(kp.volume_attachment(vol, name))
                plan.mark_attached.append(vol.attachment_name(name))
            elif not (current.get("status") or {}).get("attached"):
                plan.mark_attached.append(_va_name(current))
            new_entries[vol.attached_name] = {"name": vol.attached_name, "devicePath": vol.device_path()}
        wanted_names = {v.attached_name for v in node_wants.values()}
        for entry_name in [n for n in new_entries if n not in wanted_names]:
            if _due(unused_since, seen, (name, "name:" + entry_name), now, delay):
                del new_entries[entry_name]
        for pv, va in sorted(node_vas.items()):
            if pv not in node_wants and _due(unused_since, seen, (name, "va:" + pv), now, delay):
                plan.delete.append(_va_name(va))
        if node is not None and list(new_entries.values()) != entries:
            plan.volumes_attached = sorted(new_entries.values(), key=lambda e: str(e.get("name")))
            if plan.volumes_attached == sorted(entries, key=lambda e: str(e.get("name"))):
                plan.volumes_attached = None
        if not plan.empty():
            plans.append(plan)
    for key in [k for k in unused_since if k not in seen]:
        del unused_since[key]  # in use again, or already detached
    return plans
