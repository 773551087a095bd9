"""The one way an end-to-end test starts the whole sandbox: with its ``MCM_*`` settings in the
environment (every sandbox process inherits them) and a guaranteed ``down``."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import config
from kubernetes.client import ApiClient

from mcm_sandbox.runner import Sandbox, down, up
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.kube import ops
from mcm_tasks.settings import configure, reset_settings

#: compressed time every end-to-end sandbox starts from; a test's own env overrides it
COMPRESSED = {
    "MCM_SHORT_RETRY": "1s",
    "MCM_MEDIUM_RETRY": "2s",
    "MCM_HEALTH_RECHECK_PERIOD": "1s",
    # the shared budget is a production safeguard; here it would only slow the tests down
    "MCM_KUBE_API_QPS": "500",
    "MCM_KUBE_API_BURST": "500",
}


@contextmanager
def running_sandbox(directory: Path, env: Mapping[str, str], **up_args: Any) -> Iterator[Sandbox]:
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {**COMPRESSED, **env}.items():
            patch.setenv(key, value)
        up_args.setdefault("workers", 2)
        started = up(directory, echo=lambda _: None, **up_args)
        try:
            yield started
        finally:
            down(directory, echo=lambda _: None)


@contextmanager
def connected(sandbox: Sandbox) -> Iterator[tuple[ApiClient, ApiClient, redis.Redis]]:
    """Clients of the sandbox's control cluster, target cluster and Redis, with this process's
    settings pointing at them (the test's own cache reads and queue calls); all undone after."""
    configure({"redis_url": sandbox.redis_url, "control_kubeconfig": str(sandbox.kubeconfig)})
    control = config.new_client_from_config(config_file=str(sandbox.kubeconfig))
    target = config.new_client_from_config(config_file=str(sandbox.target_kubeconfig))
    client = redis.Redis.from_url(sandbox.redis_url)
    try:
        yield control, target, client
    finally:
        control.close()
        target.close()
        client.close()
        reset_settings()


def faults(sandbox: Sandbox, rule: Mapping[str, Any] | None) -> None:
    """Add a fault rule on the sandbox's control API server (``/sandbox/faults``), or clear them all."""
    url = sandbox.control_url + "/sandbox/faults"
    if rule is None:
        request = urllib.request.Request(url, method="DELETE")
    else:
        request = urllib.request.Request(url, data=json.dumps(rule).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})  # fmt: skip
    urllib.request.urlopen(request, timeout=5).close()


def machine_set(name: str, replicas: int, class_name: str, namespace: str = "default") -> dict[str, Any]:
    """A MachineSet of ``replicas`` machines of the named MachineClass, selected by ``set: <name>``."""
    labels = {"set": name}
    return {
        "apiVersion": API_VERSION, "kind": "MachineSet", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"class": {"kind": "MachineClass", "name": class_name}}}},
    }  # fmt: skip


def local_class(
    api: ApiClient, name: str, provider_spec: Mapping[str, Any] | None = None, namespace: str = "default"
) -> None:
    """A local-cloud MachineClass ``name`` and its user-data Secret ``<name>-secret``."""
    secret = f"{name}-secret"
    user_data = base64.b64encode(b"#!/bin/sh\n").decode()
    body = {"metadata": {"name": secret, "namespace": namespace}, "data": {"userData": user_data}}
    ops.create(api, kinds.SECRET.resource, body)
    ops.create(api, kinds.MACHINE_CLASS.resource, {
        "apiVersion": API_VERSION, "kind": "MachineClass", "metadata": {"name": name, "namespace": namespace},
        "provider": "local", "providerSpec": dict(provider_spec or {}),
        "secretRef": {"name": secret, "namespace": namespace},
    })  # fmt: skip


def machines_in(api: ApiClient, namespace: str) -> list[dict[str, Any]]:
    """The Machines of a namespace, from the API server."""
    return list(ops.list_(api, kinds.MACHINE.resource, namespace).get("items") or [])


def running_in(api: ApiClient, namespace: str) -> int:
    """How many Machines of a namespace are Running."""
    status = [(m.get("status") or {}).get("currentStatus") or {} for m in machines_in(api, namespace)]
    return [s.get("phase") for s in status].count("Running")
