"""Pure decisions of the kubelet simulator about Pods and their volumes: when a pod counts as
running, the status it gets, when a terminating pod may be removed, and which CSI volumes a node
must have attached.

Volumes follow the attach/detach controller's rules closely enough for MCM's drain to observe
them: a volume is attached to one node at a time (a pod whose volume is still attached elsewhere
waits, not Running, until it is detached there), shows in ``node.status.volumesAttached`` as
``kubernetes.io/csi/<driver>^<handle>``, and has a VolumeAttachment named like the CSI
attacher names them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from mcm_sandbox.kubelet.node import iso, parse_time

POD_CONDITIONS = ("Initialized", "Ready", "ContainersReady", "PodScheduled")


def pod_key(pod: dict[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def node_of(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def is_terminating(pod: dict[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_finished(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_running_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    ready = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return ready.get("Ready") == "True" and ready.get("ContainersReady") == "True"


def grace_elapsed(pod: dict[str, Any], now: float) -> bool:
    """The API server stamps ``deletionTimestamp`` at the end of the grace period."""
    deadline = parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    return deadline is not None and now >= deadline


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def pod_ip(pod: dict[str, Any]) -> str:
    """A stable address per pod uid, in the 100.64.0.0/10 range nothing else here uses."""
    uid = str((pod.get("metadata") or {}).get("uid") or pod_key(pod))
    n = int(_digest(uid)[:8], 16)
    return f"100.{64 + (n >> 16) % 64}.{(n >> 8) & 255}.{max(n & 255, 1)}"


def running_status(pod: dict[str, Any], host_ip: str, now: float) -> dict[str, Any]:
    """A status patch for a pod whose containers all started and passed readiness."""
    stamp = iso(now)
    status = pod.get("status") or {}
    started = status.get("startTime") or stamp
    containers = (pod.get("spec") or {}).get("containers") or []
    address = pod_ip(pod)
    return {
        "status": {
            "phase": "Running",
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}] if host_ip else [],
            "podIP": address,
            "podIPs": [{"ip": address}],
            "startTime": started,
            "conditions": [
                {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
                for t in POD_CONDITIONS
            ],
            "containerStatuses": [
                {
                    "name": c.get("name", ""),
                    "image": c.get("image", ""),
                    "imageID": f"sandbox://{c.get('image', '')}",
                    "containerID": "sandbox://" + _digest(address + c.get("name", ""))[:32],
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": started}},
                }
                for c in containers
            ],
        }
    }


def claim_names(pod: dict[str, Any]) -> list[str]:
    out = []
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            out.append(str(claim))
    return out


@dataclass(frozen=True)
class CsiVolume:
    pv_name: str
    driver: str
    handle: str

    @property
    def attached_name(self) -> str:
        return f"kubernetes.io/csi/{self.driver}^{self.handle}"

    def attachment_name(self, node: str) -> str:
        """The CSI attacher's VolumeAttachment name: stable per (volume, driver, node)."""
        return "csi-" + _digest(f"{self.handle}{self.driver}{node}")

    def device_path(self) -> str:
        return f"/dev/disk/by-id/sandbox-{self.handle}"


def csi_volume(pv: dict[str, Any]) -> CsiVolume | None:
    csi = (pv.get("spec") or {}).get("csi") or {}
    if not csi.get("driver") or not csi.get("volumeHandle"):
        return None
    return CsiVolume(
        str((pv.get("metadata") or {}).get("name") or ""), str(csi["driver"]), str(csi["volumeHandle"])
    )


def pod_volumes(
    pod: dict[str, Any],
    pvcs: dict[tuple[str, str], dict[str, Any]],
    pvs: dict[str, dict[str, Any]],
) -> list[CsiVolume]:
    """The CSI volumes a pod mounts through its claims; unbound claims and non-CSI PVs are skipped."""
    namespace, _ = pod_key(pod)
    out = []
    for claim in claim_names(pod):
        pvc = pvcs.get((namespace, claim))
        pv_name = ((pvc or {}).get("spec") or {}).get("volumeName")
        pv = pvs.get(str(pv_name)) if pv_name else None
        vol = csi_volume(pv) if pv else None
        if vol is not None:
            out.append(vol)
    return out


def volumes_attached_entries(volumes: list[CsiVolume]) -> list[dict[str, str]]:
    return [
        {"name": v.attached_name, "devicePath": v.device_path()}
        for v in sorted(volumes, key=lambda v: v.attached_name)
    ]


def volume_attachment(vol: CsiVolume, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": vol.attachment_name(node)},
        "spec": {"attacher": vol.driver, "nodeName": node, "source": {"persistentVolumeName": vol.pv_name}},
    }
