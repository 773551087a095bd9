"""Minimal API objects as the API server returns them, for routing tables, mirror tests and the
synthetic events of the queue bench. Only the fields routing and indexing look at are filled."""

from __future__ import annotations

from typing import Any

from mcm_tasks.api import Obj
from mcm_tasks.api.constants import API_VERSION, NODE_FINALIZER, NODE_LABEL_KEY

NS = "mcm"


def _meta(
    name: str,
    namespace: str | None,
    rv: str,
    *,
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
    deleting: bool = False,
    owner: tuple[str, str, str] | None = None,
    generation: int | None = None,
) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "uid": uid or f"uid-{name}", "resourceVersion": rv}
    if namespace:
        m["namespace"] = namespace
    if labels:
        m["labels"] = dict(labels)
    if annotations:
        m["annotations"] = dict(annotations)
    if finalizers:
        m["finalizers"] = list(finalizers)
    if deleting:
        m["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if generation is not None:
        m["generation"] = generation
    if owner:
        kind, owner_name, owner_uid = owner
        m["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": kind,
                "name": owner_name,
                "uid": owner_uid,
                "controller": True,
            }
        ]
    return m


def machine(
    name: str,
    *,
    rv: str = "1",
    generation: int = 1,
    machine_set: str | None = None,
    machine_set_uid: str | None = None,
    cls: str = "cls",
    node: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    deleting: bool = False,
    phase: str = "",
    conditions: list[dict[str, str]] | None = None,
    description: str = "",
    namespace: str = NS,
) -> Obj:
    all_labels = dict(labels or {})
    if node:
        all_labels[NODE_LABEL_KEY] = node
    owner = ("MachineSet", machine_set, machine_set_uid or f"uid-{machine_set}") if machine_set else None
    status: dict[str, Any] = {}
    if phase:
        status["currentStatus"] = {"phase": phase}
    if conditions is not None:
        status["conditions"] = conditions
    if description:
        status["lastOperation"] = {"description": description}
    return {
        "apiVersion": API_VERSION,
        "kind": "Machine",
        "metadata": _meta(
            name,
            namespace,
            rv,
            labels=all_labels,
            annotations=annotations,
            deleting=deleting,
            owner=owner,
            generation=generation,
        ),
        "spec": {"class": {"kind": "MachineClass", "name": cls}},
        "status": status,
    }


def machine_set(
    name: str,
    *,
    rv: str = "1",
    deployment: str | None = None,
    selector: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    replicas: int = 1,
    deleting: bool = False,
) -> Obj:
    owner = ("MachineDeployment", deployment, f"uid-{deployment}") if deployment else None
    spec: dict[str, Any] = {"replicas": replicas}
    if selector is not None:
        spec["selector"] = {"matchLabels": selector}
    return {
        "apiVersion": API_VERSION,
        "kind": "MachineSet",
        "metadata": _meta(name, NS, rv, labels=labels, owner=owner, deleting=deleting, generation=1),
        "spec": spec,
        "status": {"replicas": 0},
    }


def machine_deployment(
    name: str, *, rv: str = "1", strategy: str = "RollingUpdate", selector: dict[str, str] | None = None
) -> Obj:
    spec: dict[str, Any] = {
        "replicas": 1,
        "strategy": {"type": strategy},
        "template": {"spec": {"class": {"kind": "MachineClass", "name": "cls"}}},
    }
    if selector is not None:
        spec["selector"] = {"matchLabels": selector}
    return {
        "apiVersion": API_VERSION,
        "kind": "MachineDeployment",
        "metadata": _meta(name, NS, rv),
        "spec": spec,
    }


def machine_class(
    name: str,
    *,
    rv: str = "1",
    secret: str | None = "secret",
    credentials: str | None = None,
    finalizers: list[str] | None = None,
    provider_spec: dict[str, Any] | None = None,
) -> Obj:
    obj: Obj = {
        "apiVersion": API_VERSION,
        "kind": "MachineClass",
        "metadata": _meta(name, NS, rv, finalizers=finalizers),
        "provider": "local",
        "providerSpec": provider_spec or {},
    }
    if secret:
        obj["secretRef"] = {"name": secret, "namespace": NS}
    if credentials:
        obj["credentialsSecretRef"] = {"name": credentials, "namespace": NS}
    return obj


def secret(
    name: str, *, rv: str = "1", data: dict[str, str] | None = None, finalizers: list[str] | None = None
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(name, NS, rv, finalizers=finalizers),
        "data": dict(data if data is not None else {"userData": "c2VjcmV0"}),
        "type": "Opaque",
    }


def node(
    name: str,
    *,
    rv: str = "1",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    taints: list[str] | None = None,
    conditions: dict[str, str] | None = None,
    finalizers: list[str] | None = (NODE_FINALIZER,),  # type: ignore[assignment]
    deleting: bool = False,
    volumes: list[str] | None = None,
) -> Obj:
    status: dict[str, Any] = {
        "conditions": [
            {"type": t, "status": s, "lastHeartbeatTime": f"2026-01-01T00:00:{rv[-2:]:0>2}Z"}
            for t, s in (conditions if conditions is not None else {"Ready": "True"}).items()
        ],
        "images": [{"names": ["registry/big-image:1"], "sizeBytes": 1}],
    }
    if volumes:
        status["volumesAttached"] = [{"name": v, "devicePath": ""} for v in volumes]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(
            name,
            None,
            rv,
            labels=labels,
            annotations=annotations,
            finalizers=list(finalizers or []),
            deleting=deleting,
        ),
        "spec": {"taints": [{"key": t, "effect": "NoSchedule"} for t in taints or ()]},
        "status": status,
    }


def pod(
    name: str, *, node_name: str = "", rv: str = "1", namespace: str = "default", deleting: bool = False
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**_meta(name, namespace, rv, deleting=deleting), "managedFields": [{"manager": "x"}]},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "image": "busybox", "env": [{"name": "BIG", "value": "x" * 100}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "pvc"}}],
            "priority": 0,
            "terminationGracePeriodSeconds": 30,
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "podIP": "10.0.0.1",
        },
    }


def volume_attachment(name: str, *, node_name: str, pv: str, rv: str = "1") -> Obj:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": _meta(name, None, rv),
        "spec": {"attacher": "csi", "nodeName": node_name, "source": {"persistentVolumeName": pv}},
    }


def persistent_volume(name: str, *, claim: str | None = None, rv: str = "1") -> Obj:
    spec: dict[str, Any] = {"capacity": {"storage": "1Gi"}}
    if claim:
        ns, _, claim_name = claim.partition("/")
        spec["claimRef"] = {"namespace": ns, "name": claim_name}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": _meta(name, None, rv), "spec": spec}


def bump(obj: Obj, rv: str, **changes: Any) -> Obj:
    """A copy with a new resourceVersion and top-level metadata fields replaced (``deletionTimestamp``…)."""
    m = {**obj["metadata"], "resourceVersion": rv, **changes}
    return {**obj, "metadata": m}
