"""``meta.k8s.io/v1`` Table output, which ``kubectl get`` asks for: printer columns per type.

Built-in types get the columns kubectl users know; custom resources get Name, their CRD's
``additionalPrinterColumns`` (evaluated as JSONPath) and Age when none are declared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from mcm_sandbox.apiserver.objects import parse_time
from mcm_sandbox.apiserver.resources import PrinterColumn, ResourceType

Obj = dict[str, Any]
Cell = Callable[[Obj], Any]


def human_duration(seconds: float) -> str:
    """apimachinery's HumanDuration, the way kubectl prints ages."""
    if seconds < -1:
        return "<invalid>"
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        return f"{h // 8760}y{(h % 8760) // 24}d"
    return f"{h // 8760}y"


def _age(stamp: Any) -> str:
    if not isinstance(stamp, str) or not stamp:
        return "<unknown>"
    try:
        return human_duration(time.time() - parse_time(stamp))
    except ValueError:
        return "<invalid>"


def _meta(obj: Obj) -> Obj:
    meta: Obj = obj.get("metadata") or {}
    return meta


def _spec(obj: Obj) -> Obj:
    spec: Obj = obj.get("spec") or {}
    return spec


def _status(obj: Obj) -> Obj:
    status: Obj = obj.get("status") or {}
    return status


def _name(obj: Obj) -> Any:
    return _meta(obj).get("name", "")


def _created(obj: Obj) -> Any:
    return _age(_meta(obj).get("creationTimestamp"))


def _pod_ready(obj: Obj) -> str:
    statuses = _status(obj).get("containerStatuses") or []
    total = len(_spec(obj).get("containers") or [])
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def _pod_status(obj: Obj) -> str:
    if _meta(obj).get("deletionTimestamp"):
        return "Terminating"
    return str(_status(obj).get("reason") or _status(obj).get("phase") or "Unknown")


def _node_status(obj: Obj) -> str:
    ready = next((c for c in _status(obj).get("conditions") or [] if c.get("type") == "Ready"), None)
    text = "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    return text + (",SchedulingDisabled" if _spec(obj).get("unschedulable") else "")


def _node_roles(obj: Obj) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix) :] for k in (_meta(obj).get("labels") or {}) if k.startswith(prefix))
    return ",".join(roles) or "<none>"


def _address(kind: str) -> Cell:
    def cell(obj: Obj) -> str:
        found = [a.get("address", "") for a in _status(obj).get("addresses") or [] if a.get("type") == kind]
        return found[0] if found else "<none>"

    return cell


def _involved(obj: Obj) -> str:
    ref = obj.get("involvedObject") or obj.get("regarding") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


def _or_none(value: Any) -> Any:
    return "<none>" if value in (None, "") else value


def _modes(obj: Obj) -> str:
    short = {
        "ReadWriteOnce": "RWO",
        "ReadOnlyMany": "ROX",
        "ReadWriteMany": "RWX",
        "ReadWriteOncePod": "RWOP",
    }
    return ",".join(short.get(m, m) for m in _spec(obj).get("accessModes") or [])


Column = tuple[str, str, int, Cell]  # name, type, priority, cell


def _ready_of(o: Obj) -> str:
    return f"{_status(o).get('readyReplicas', 0)}/{_spec(o).get('replicas', 0)}"


def _count(path: str, where: str = "status") -> Cell:
    return lambda o: int((_status(o) if where == "status" else _spec(o)).get(path) or 0)


def _ports(o: Obj) -> str:
    parts = []
    for p in _spec(o).get("ports") or []:
        node = f":{p['nodePort']}" if p.get("nodePort") else ""
        parts.append(f"{p.get('port')}{node}/{p.get('protocol', 'TCP')}")
    return ",".join(parts) or "<none>"


def _external_ip(o: Obj) -> str:
    ingress = (_status(o).get("loadBalancer") or {}).get("ingress") or []
    ips = [i.get("ip") or i.get("hostname") for i in ingress] + list(_spec(o).get("externalIPs") or [])
    if ips:
        return ",".join(str(ip) for ip in ips)
    return "<pending>" if _spec(o).get("type") == "LoadBalancer" else "<none>"


def _role_ref(o: Obj) -> str:
    ref = o.get("roleRef") or {}
    return f"{ref.get('kind', '')}/{ref.get('name', '')}"


_AGE: Column = ("Age", "string", 0, _created)
BUILTIN_COLUMNS: dict[str, list[Column]] = {
    "pods": [
        ("Ready", "string", 0, _pod_ready),
        ("Status", "string", 0, _pod_status),
        (
            "Restarts",
            "string",
            0,
            lambda o: str(
                sum(int(c.get("restartCount", 0)) for c in _status(o).get("containerStatuses") or [])
            ),
        ),
        _AGE,
        ("IP", "string", 1, lambda o: _or_none(_status(o).get("podIP"))),
        ("Node", "string", 1, lambda o: _or_none(_spec(o).get("nodeName"))),
    ],
    "nodes": [
        ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, _node_roles),
        _AGE,
        ("Version", "string", 0, lambda o: (_status(o).get("nodeInfo") or {}).get("kubeletVersion", "")),
        ("Internal-IP", "string", 1, _address("InternalIP")),
        ("External-IP", "string", 1, _address("ExternalIP")),
    ],
    "namespaces": [("Status", "string", 0, lambda o: _status(o).get("phase", "")), _AGE],
    "configmaps": [
        ("Data", "integer", 0, lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})),
        _AGE,
    ],
    "secrets": [
        ("Type", "string", 0, lambda o: o.get("type", "Opaque")),
        ("Data", "integer", 0, lambda o: len(o.get("data") or {})),
        _AGE,
    ],
    "events": [
        (
            "Last Seen",
            "string",
            0,
            lambda o: _age(o.get("lastTimestamp") or o.get("eventTime") or _meta(o).get("creationTimestamp")),
        ),
        ("Type", "string", 0, lambda o: o.get("type", "")),
        ("Reason", "string", 0, lambda o: o.get("reason", "")),
        ("Object", "string", 0, _involved),
        ("Message", "string", 0, lambda o: o.get("message") or o.get("note") or ""),
    ],
    "persistentvolumes": [
        ("Capacity", "string", 0, lambda o: (_spec(o).get("capacity") or {}).get("storage", "")),
        ("Access Modes", "string", 0, _modes),
        ("Reclaim Policy", "string", 0, lambda o: _spec(o).get("persistentVolumeReclaimPolicy", "")),
        ("Status", "string", 0, lambda o: _status(o).get("phase", "")),
        (
            "Claim",
            "string",
            0,
            lambda o: "/".join(
                filter(None, [(_spec(o).get("claimRef") or {}).get(k, "") for k in ("namespace", "name")])
            ),
        ),
        ("StorageClass", "string", 0, lambda o: _spec(o).get("storageClassName", "")),
        _AGE,
    ],
    "persistentvolumeclaims": [
        ("Status", "string", 0, lambda o: _status(o).get("phase", "")),
        ("Volume", "string", 0, lambda o: _spec(o).get("volumeName", "")),
        ("Capacity", "string", 0, lambda o: (_status(o).get("capacity") or {}).get("storage", "")),
        ("Access Modes", "string", 0, _modes),
        ("StorageClass", "string", 0, lambda o: _or_none(_spec(o).get("storageClassName"))),
        _AGE,
    ],
    "poddisruptionbudgets.policy": [
        ("Min Available", "string", 0, lambda o: str(_spec(o).get("minAvailable", "N/A"))),
        ("Max Unavailable", "string", 0, lambda o: str(_spec(o).get("maxUnavailable", "N/A"))),
        ("Allowed Disruptions", "integer", 0, lambda o: _status(o).get("disruptionsAllowed", 0)),
        _AGE,
    ],
    "volumeattachments.storage.k8s.io": [
        ("Attacher", "string", 0, lambda o: _spec(o).get("attacher", "")),
        ("PV", "string", 0, lambda o: (_spec(o).get("source") or {}).get("persistentVolumeName", "")),
        ("Node", "string", 0, lambda o: _spec(o).get("nodeName", "")),
        ("Attached", "boolean", 0, lambda o: bool(_status(o).get("attached"))),
        _AGE,
    ],
    "leases.coordination.k8s.io": [
        ("Holder", "string", 0, lambda o: _spec(o).get("holderIdentity", "")),
        _AGE,
    ],
    "deployments.apps": [
        ("Ready", "string", 0, _ready_of),
        ("Up-to-date", "integer", 0, _count("updatedReplicas")),
        ("Available", "integer", 0, _count("availableReplicas")),
        _AGE,
    ],
    "replicasets.apps": [
        ("Desired", "integer", 0, _count("replicas", "spec")),
        ("Current", "integer", 0, _count("replicas")),
        ("Ready", "integer", 0, _count("readyReplicas")),
        _AGE,
    ],
    "replicationcontrollers": [
        ("Desired", "integer", 0, _count("replicas", "spec")),
        ("Current", "integer", 0, _count("replicas")),
        ("Ready", "integer", 0, _count("readyReplicas")),
        _AGE,
    ],
    "statefulsets.apps": [("Ready", "string", 0, _ready_of), _AGE],
    "daemonsets.apps": [
        ("Desired", "integer", 0, _count("desiredNumberScheduled")),
        ("Current", "integer", 0, _count("currentNumberScheduled")),
        ("Ready", "integer", 0, _count("numberReady")),
        ("Up-to-date", "integer", 0, _count("updatedNumberScheduled")),
        ("Available", "integer", 0, _count("numberAvailable")),
        _AGE,
    ],
    "jobs.batch": [
        (
            "Completions",
            "string",
            0,
            lambda o: f"{_status(o).get('succeeded', 0)}/{_spec(o).get('completions', 1)}",
        ),
        _AGE,
    ],
    "cronjobs.batch": [
        ("Schedule", "string", 0, lambda o: _spec(o).get("schedule", "")),
        ("Suspend", "boolean", 0, lambda o: bool(_spec(o).get("suspend"))),
        ("Active", "integer", 0, lambda o: len(_status(o).get("active") or [])),
        _AGE,
    ],
    "services": [
        ("Type", "string", 0, lambda o: _spec(o).get("type", "ClusterIP")),
        ("Cluster-IP", "string", 0, lambda o: _or_none(_spec(o).get("clusterIP"))),
        ("External-IP", "string", 0, _external_ip),
        ("Port(s)", "string", 0, _ports),
        _AGE,
    ],
    "serviceaccounts": [("Secrets", "integer", 0, lambda o: len(o.get("secrets") or [])), _AGE],
    "rolebindings.rbac.authorization.k8s.io": [("Role", "string", 0, _role_ref), _AGE],
    "clusterrolebindings.rbac.authorization.k8s.io": [("Role", "string", 0, _role_ref), _AGE],
    "horizontalpodautoscalers.autoscaling": [
        (
            "Reference",
            "string",
            0,
            lambda o: "/".join(
                str((_spec(o).get("scaleTargetRef") or {}).get(k, "")) for k in ("kind", "name")
            ),
        ),
        ("MinPods", "integer", 0, lambda o: _spec(o).get("minReplicas", 1)),
        ("MaxPods", "integer", 0, lambda o: _spec(o).get("maxReplicas", 0)),
        ("Replicas", "integer", 0, lambda o: _status(o).get("currentReplicas", 0)),
        _AGE,
    ],
    "customresourcedefinitions.apiextensions.k8s.io": [
        ("Created At", "date", 0, lambda o: _meta(o).get("creationTimestamp", "")),
    ],
}


@lru_cache(maxsize=256)
def _compiled(path: str) -> Any:
    from jsonpath_ng.ext import parse

    expr = path.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    return parse("$" + expr if expr.startswith(".") or expr.startswith("[") else expr)


def json_path(obj: Obj, path: str) -> Any:
    try:
        found = [m.value for m in _compiled(path).find(obj)]
    except Exception:  # a bad path prints as an empty cell, as kubectl does
        return None
    if not found:
        return None
    return found[0] if len(found) == 1 else ",".join(str(v) for v in found)


def _custom_cell(col: PrinterColumn) -> Cell:
    def cell(obj: Obj) -> Any:
        value = json_path(obj, col.json_path)
        if value is None:
            return None
        if col.type == "date":
            return _age(value)
        if col.type == "integer":
            try:
                return int(value)
            except (TypeError, ValueError):
                return None
        if col.type == "number":
            try:
                return float(value)
            except (TypeError, ValueError):
                return None
        if col.type == "boolean":
            return bool(value)
        return value if isinstance(value, str) else str(value)

    return cell


def columns_for(rt: ResourceType) -> list[Column]:
    name: Column = ("Name", "string", 0, _name)
    if rt.crd:
        declared = [(c.name, c.type, c.priority, _custom_cell(c)) for c in rt.columns or []]
        return [name, *declared] if declared else [name, _AGE]
    if rt.storage == "events":
        return BUILTIN_COLUMNS["events"]
    return [name, *BUILTIN_COLUMNS.get(rt.storage, [_AGE])]


def table(rt: ResourceType, objs: list[Obj], list_meta: Obj, include_object: str = "Metadata") -> Obj:
    columns = columns_for(rt)
    rows = []
    for obj in objs:
        row: Obj = {"cells": [cell(obj) for _, _, _, cell in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [
            {"name": n, "type": t, "format": "name" if n == "Name" else "", "description": n, "priority": p}
            for n, t, p, _ in columns
        ],
        "rows": rows,
    }
