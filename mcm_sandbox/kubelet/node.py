"""Pure decisions of the kubelet simulator about Nodes: what a VM registers, which conditions it
posts, when a heartbeat is due, and when the (simulated) node-lifecycle controller gives up on a
silent node. No I/O here, so every rule is a table test. A VM is anything shaped like
:class:`KubeletVM` (a local-cloud VM, an EC2 instance), so both clouds get the same Nodes.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime
from typing import Any, Protocol

ANNOTATION_PREFIX = "sandbox.mcm-tasks.io/"
CONDITION_ANNOTATION_PREFIX = ANNOTATION_PREFIX + "condition-"
HEARTBEAT_ANNOTATION = ANNOTATION_PREFIX + "heartbeat"
CONDITION_STATUSES = ("True", "False", "Unknown")
LOCAL_PROVIDER_PREFIX = "local:///"
KUBELET_VERSION = "v1.31.0-sandbox"

#: reason of a condition the simulator set on an annotation's order
ORDER_REASON = "SandboxOrder"
#: the conditions a kubelet posts on every heartbeat, with their healthy status and reason
KUBELET_CONDITIONS: dict[str, tuple[str, str, str]] = {
    "MemoryPressure": ("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    "Ready": ("True", "KubeletReady", "kubelet is posting ready status"),
}
#: what node-lifecycle sets on a node whose kubelet went silent
UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."


class KubeletVM(Protocol):
    """What a Node is built from, whichever cloud the VM runs in."""

    @property
    def id(self) -> str: ...
    @property
    def provider_id(self) -> str: ...
    @property
    def node_name(self) -> str: ...
    @property
    def zone(self) -> str: ...
    @property
    def region(self) -> str: ...
    @property
    def instance_type(self) -> str: ...
    @property
    def architecture(self) -> str: ...
    @property
    def capacity(self) -> dict[str, str]: ...
    @property
    def labels(self) -> dict[str, str]: ...
    @property
    def internal_ip(self) -> str: ...
    @property
    def registered_at(self) -> float | None: ...

    def joins(self, now: float) -> bool:
        """Whether its kubelet should have a Node registered right now."""
        ...


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def is_local_node(node: dict[str, Any]) -> bool:
    return str((node.get("spec") or {}).get("providerID") or "").startswith(LOCAL_PROVIDER_PREFIX)


def annotations_of(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def heartbeat_stopped(annotations: dict[str, str]) -> bool:
    return annotations.get(HEARTBEAT_ANNOTATION, "").strip().lower() == "stop"


def ordered_conditions(annotations: dict[str, str]) -> dict[str, str]:
    """``condition-<Type>: <status>`` orders; values other than True/False/Unknown are ignored."""
    out = {}
    for key, value in annotations.items():
        if key.startswith(CONDITION_ANNOTATION_PREFIX):
            ctype = key.removeprefix(CONDITION_ANNOTATION_PREFIX)
            status = value.strip().capitalize()
            if ctype and status in CONDITION_STATUSES:
                out[ctype] = status
    return out


def node_labels(vm: KubeletVM) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": vm.node_name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": vm.architecture,
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": vm.architecture,
        "node.kubernetes.io/instance-type": vm.instance_type,
        "beta.kubernetes.io/instance-type": vm.instance_type,
        "topology.kubernetes.io/region": vm.region,
        "topology.kubernetes.io/zone": vm.zone,
        "failure-domain.beta.kubernetes.io/region": vm.region,
        "failure-domain.beta.kubernetes.io/zone": vm.zone,
        **vm.labels,
    }


def node_addresses(vm: KubeletVM) -> list[dict[str, str]]:
    return [{"type": "InternalIP", "address": vm.internal_ip}, {"type": "Hostname", "address": vm.node_name}]


def _condition(ctype: str, status: str, reason: str, message: str, now: str, since: str) -> dict[str, str]:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": since,
    }


def node_manifest(vm: KubeletVM, now: float) -> dict[str, Any]:
    """The Node a VM's kubelet registers, status included (a node may be created with status)."""
    stamp = iso(now)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": vm.node_name,
            "labels": node_labels(vm),
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"providerID": vm.provider_id},
        "status": {
            "capacity": dict(vm.capacity),
            "allocatable": dict(vm.capacity),
            "addresses": node_addresses(vm),
            "conditions": [
                _condition(t, s, r, m, stamp, stamp) for t, (s, r, m) in KUBELET_CONDITIONS.items()
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": vm.id,
                "systemUUID": vm.id,
                "bootID": vm.id,
                "kernelVersion": "6.1.0-sandbox",
                "osImage": "mcm-tasks sandbox",
                "containerRuntimeVersion": "sandbox://1.0",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": vm.architecture,
            },
        },
    }


def conditions_by_type(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in (node.get("status") or {}).get("conditions") or []}


def desired_statuses(node: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """Type → (status, reason, message) the kubelet posts: its own conditions, overridden by
    annotation orders; a condition an order set earlier goes back to its healthy status (True for
    Ready, False for anything else) when the order is lifted."""
    orders = ordered_conditions(annotations_of(node))
    out = dict(KUBELET_CONDITIONS)
    for ctype, cond in conditions_by_type(node).items():
        if cond.get("reason") == ORDER_REASON and ctype not in orders and ctype not in out:
            out[ctype] = ("False", "SandboxOrderLifted", "no longer ordered by annotation")
    for ctype, status in orders.items():
        out[ctype] = (status, ORDER_REASON, f"set by annotation {CONDITION_ANNOTATION_PREFIX}{ctype}")
    return out


def status_changed(node: dict[str, Any]) -> bool:
    """Whether the posted conditions differ from what the kubelet would post now (an order)."""
    desired = desired_statuses(node)
    current = conditions_by_type(node)
    return any(
        current.get(t, {}).get("status") != s or current.get(t, {}).get("reason") != r
        for t, (s, r, _) in desired.items()
    )


def heartbeat_period(name: str, interval: float) -> float:
    """``interval`` stretched by 0–24 % per node name, so that nodes registered together drift
    apart instead of heartbeating in one burst forever."""
    return interval * (1 + (zlib.crc32(name.encode()) % 25) / 100)


def heartbeat_due_at(node: dict[str, Any], interval: float) -> float:
    """When the Node's next heartbeat is due (-inf: it has none yet): its last one plus its period."""
    last = parse_time(conditions_by_type(node).get("Ready", {}).get("lastHeartbeatTime"))
    period = heartbeat_period(str((node.get("metadata") or {}).get("name") or ""), interval)
    return float("-inf") if last is None else last + period


def heartbeat_due(node: dict[str, Any], now: float, interval: float) -> bool:
    """A status post is due when an order changed something, or the last heartbeat is old."""
    return status_changed(node) or now >= heartbeat_due_at(node, interval)


def heartbeat_conditions(node: dict[str, Any], now: float) -> list[dict[str, str]]:
    """The conditions of a heartbeat; lastTransitionTime only moves when the status does."""
    stamp = iso(now)
    current = conditions_by_type(node)
    out = []
    for ctype, (status, reason, message) in desired_statuses(node).items():
        old = current.get(ctype, {})
        since = old.get("lastTransitionTime") if old.get("status") == status and old else None
        out.append(_condition(ctype, status, reason, message, stamp, since or stamp))
    return out


def lifecycle_unknown_conditions(
    node: dict[str, Any], now: float, grace: float
) -> list[dict[str, str]] | None:
    """What node-lifecycle writes on a node silent for longer than ``grace``: the kubelet's own
    conditions go Unknown (heartbeat times kept, so one can see when it went quiet). None when the
    node is fresh or already marked."""
    current = conditions_by_type(node)
    ready = current.get("Ready")
    if ready is None or ready.get("status") == "Unknown":
        return None
    last = parse_time(ready.get("lastHeartbeatTime"))
    if last is not None and now - last < grace:
        return None
    stamp = iso(now)
    out = []
    for ctype in KUBELET_CONDITIONS:
        old = current.get(ctype, {})
        out.append(
            {
                "type": ctype,
                "status": "Unknown",
                "reason": UNKNOWN_REASON,
                "message": UNKNOWN_MESSAGE,
                "lastHeartbeatTime": old.get("lastHeartbeatTime") or stamp,
                "lastTransitionTime": stamp,
            }
        )
    return out


def node_ip(node: dict[str, Any]) -> str:
    for addr in (node.get("status") or {}).get("addresses") or []:
        if addr.get("type") == "InternalIP":
            return str(addr.get("address") or "")
    return ""
