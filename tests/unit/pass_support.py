"""The objects the whole-pass tests on the recording fake (tests/kube_fake.py) start from: API
dicts as a user or a controller would have written them (no tests here)."""

from __future__ import annotations

import base64
from typing import Any

from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.api.constants import MCM_FINALIZER

NS = "shoot--pass"
MACHINES = kinds.MACHINE.resource.plural
SETS = kinds.MACHINE_SET.resource.plural
DEPLOYMENTS = kinds.MACHINE_DEPLOYMENT.resource.plural
USER_DATA = b"#!/bin/sh\necho <<MACHINE_NAME>>\n"

Obj = dict[str, Any]


def secret(name: str = "cloud") -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
            "data": {"userData": base64.b64encode(USER_DATA).decode()}}  # fmt: skip


def machine_class(name: str = "cls", **extra: Any) -> Obj:
    """A local class with its secret, already carrying MCM's finalizer (as the class reconcile
    leaves a class in use)."""
    return {"apiVersion": API_VERSION, "kind": "MachineClass",
            "metadata": {"name": name, "namespace": NS, "finalizers": [MCM_FINALIZER]},
            "provider": "local", "providerSpec": {}, "secretRef": {"name": "cloud", "namespace": NS},
            **extra}  # fmt: skip


def machine(name: str, *, labels: dict[str, str] | None = None, finalizers: bool = False,
            spec: Obj | None = None, status: Obj | None = None, **meta: Any) -> Obj:  # fmt: skip
    metadata: Obj = {"name": name, "namespace": NS, "labels": labels or {}, **meta}
    if finalizers:
        metadata["finalizers"] = [MCM_FINALIZER]
    body: Obj = {"apiVersion": API_VERSION, "kind": "Machine", "metadata": metadata,
                 "spec": {"class": {"kind": "MachineClass", "name": "cls"}, **(spec or {})}}  # fmt: skip
    if status is not None:
        body["status"] = status
    return body


def node(name: str, ready: str = "True", **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, **meta},
            "spec": {"providerID": f"local:///{name}"},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}  # fmt: skip


def machine_deployment(replicas: int = 3, strategy: str = "RollingUpdate", class_name: str = "cls",
                       surge: int = 1, unavailable: int = 0) -> Obj:  # fmt: skip
    """``web``: a deployment of machines of ``class_name``, labelled ``name: web`` (what MCM's health
    check and Gardener's worker read the deployment by)."""
    strat: Obj = {"type": strategy}
    if strategy == "RollingUpdate":
        strat["rollingUpdate"] = {"maxSurge": surge, "maxUnavailable": unavailable}
    elif strategy == "InPlaceUpdate":
        strat["inPlaceUpdate"] = {
            "maxSurge": surge,
            "maxUnavailable": unavailable,
            "orchestrationType": "Auto",
        }
    template = {"metadata": {"labels": {"name": "web"}},
                "spec": {"class": {"kind": "MachineClass", "name": class_name}}}  # fmt: skip
    spec = {"replicas": replicas, "selector": {"matchLabels": {"name": "web"}}, "strategy": strat,
            "template": template}  # fmt: skip
    return {"apiVersion": API_VERSION, "kind": "MachineDeployment",
            "metadata": {"name": "web", "namespace": NS}, "spec": spec}  # fmt: skip
