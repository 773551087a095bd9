"""A pool of machines on the local provider, as the Redis end-to-end tests start one: a Secret with
userData, a MachineClass using it and a MachineDeployment of that class; and how many of its
machines run."""

from __future__ import annotations

import base64
from typing import Any

from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.kube import ops

NS = "default"
USER_DATA = base64.b64encode(b"#!/bin/sh\necho <<MACHINE_NAME>>\n").decode()


def create_pool(
    control: ApiClient,
    name: str,
    replicas: int,
    *,
    secret: dict[str, Any] | None = None,
    provider_spec: dict[str, Any] | None = None,
) -> None:
    """``<name>-secret`` (or ``secret``: metadata and data; its name is set), ``<name>-class`` and the
    MachineDeployment ``<name>`` (RollingUpdate, one surge) with ``replicas`` machines."""
    body = secret or {"metadata": {}, "data": {"userData": USER_DATA}}
    body["metadata"] = {**body.get("metadata", {}), "name": f"{name}-secret", "namespace": NS}
    ops.create(control, kinds.SECRET.resource, body)
    ops.create(
        control,
        kinds.MACHINE_CLASS.resource,
        {
            "apiVersion": API_VERSION,
            "kind": "MachineClass",
            "metadata": {"name": f"{name}-class", "namespace": NS},
            "provider": "local",
            "providerSpec": provider_spec if provider_spec is not None else {"bootDelaySeconds": 0.2},
            "secretRef": {"name": f"{name}-secret", "namespace": NS},
        },
    )
    labels = {"pool": name}
    ops.create(
        control,
        kinds.MACHINE_DEPLOYMENT.resource,
        {
            "apiVersion": API_VERSION,
            "kind": "MachineDeployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"class": {"kind": "MachineClass", "name": f"{name}-class"}},
                },
            },
        },
    )


def phase(machine: dict[str, Any]) -> str:
    return str(((machine.get("status") or {}).get("currentStatus") or {}).get("phase") or "")


def machines(control: ApiClient) -> list[dict[str, Any]]:
    return list(ops.list_(control, kinds.MACHINE.resource, NS)["items"])


def running(control: ApiClient) -> int:
    return sum(1 for m in machines(control) if phase(m) == "Running")
