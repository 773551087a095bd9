"""Shared set-up of the machine controller's integration tests (no tests here).

The reconcilers run in-process against the sandbox API server (as control and target cluster) and a
real Redis, with the local provider; the kubelet simulator runs in a thread where Nodes must appear.
Time is compressed through the settings.
"""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import config
from kubernetes.client import ApiClient

from mcm_sandbox.crds import install_crds
from mcm_sandbox.kubelet.simulator import KubeletSimulator
from mcm_sandbox.procs import ApiServer, wait_until
from mcm_tasks import kinds
from mcm_tasks.api import Machine
from mcm_tasks.api.constants import (
    MCM_FINALIZER,
)
from mcm_tasks.controllers.machine.reconcile import reconcile_machine
from mcm_tasks.kube import ops, rest
from mcm_tasks.kube.clients import reset_clusters
from mcm_tasks.queue import Requeue
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, reset_settings
from providers.local import LocalCloud

WAIT = 20.0
USER_DATA = b"#!/bin/sh\necho <<MACHINE_NAME>>\n"

#: compressed time for every test; a test may override some
SETTINGS: dict[str, Any] = {
    "short_retry": "1s",
    "medium_retry": "2s",
    "long_retry": "30s",
    "resource_exhausted_retry": "1s",
    "health_recheck_period": "1s",
    "machine_creation_timeout": "60s",
    "machine_health_timeout": "60s",
    "kube_api_qps": 1000,
    "kube_api_burst": 1000,
}


@dataclass
class Env:
    api: ApiClient
    namespace: str
    prefix: str
    redis_url: str
    base_settings: dict[str, Any]
    _kubelet: list[tuple[threading.Event, threading.Thread]] = field(default_factory=list)

    def settings(self, **overrides: Any) -> None:
        """Compress (or stretch) some more for this test."""
        configure({**self.base_settings, **overrides})

    # --- objects ---
    def name(self, base: str) -> str:
        return f"{self.prefix}-{base}"

    def key(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    def secret(self, name: str, data: dict[str, bytes] | None = None) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": self.namespace},
            "data": {k: base64.b64encode(v).decode() for k, v in (data or {"userData": USER_DATA}).items()},
        }
        return ops.create(self.api, kinds.SECRET.resource, body, self.namespace)

    def machine_class(
        self,
        name: str,
        provider_spec: dict[str, Any] | None = None,
        *,
        secret: str | None = None,
        node_template: dict[str, Any] | None = None,
        reconcile: bool = True,
        **extra: Any,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineClass",
            "metadata": {"name": name, "namespace": self.namespace},
            "provider": "local",
            "providerSpec": provider_spec or {},
            **extra,
        }
        if secret is not None:
            body["secretRef"] = {"name": secret, "namespace": self.namespace}
        if node_template is not None:
            body["nodeTemplate"] = node_template
        if reconcile:
            # what the class reconcile writes once a machine uses the class (upstream adds the
            # finalizer only then): machines reconciled by hand find their class ready
            body["metadata"]["finalizers"] = [MCM_FINALIZER]
        return ops.create(self.api, kinds.MACHINE_CLASS.resource, body, self.namespace)

    def setup_class(self, provider_spec: dict[str, Any] | None = None, **kw: Any) -> str:
        """A secret with userData and a reconciled local class using it; the class's name."""
        secret, cls = self.name("secret"), self.name("class")
        self.secret(secret)
        self.machine_class(cls, provider_spec, secret=secret, **kw)
        return cls

    def machine(
        self, name: str, class_name: str, *, labels: dict[str, str] | None = None, **spec: Any
    ) -> Machine:
        body = {
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "Machine",
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels or {}},
            "spec": {"class": {"kind": "MachineClass", "name": class_name}, **spec},
        }
        return Machine.model_validate(ops.create(self.api, kinds.MACHINE.resource, body, self.namespace))

    def get(self, name: str) -> Machine:
        found = ops.get(self.api, kinds.MACHINE.resource, name, self.namespace)
        assert found is not None
        return Machine.model_validate(found)

    def node(self, name: str) -> dict[str, Any] | None:
        return ops.get(self.api, kinds.NODE.resource, name, missing_ok=True)

    def events(self, name: str) -> list[dict[str, Any]]:
        items = ops.list_(self.api, kinds.EVENT.resource, self.namespace)["items"]
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]

    def event_reasons(self, name: str) -> set[str]:
        return {str(e.get("reason")) for e in self.events(name)}

    def annotate_node(self, name: str, annotations: Mapping[str, str | None]) -> None:
        ops.patch(self.api, kinds.NODE.resource, name, {"metadata": {"annotations": dict(annotations)}})

    def cloud(self) -> LocalCloud:
        return LocalCloud(get_redis(self.redis_url))

    def live_vms(self, machine: str) -> list[Any]:
        return [vm for vm in self.cloud().by_machine(machine) if vm.live()]

    # --- driving ---
    def reconcile(self, name: str) -> Requeue | None:
        return reconcile_machine(self.key(name))

    def reconcile_until(self, name: str, done: Callable[[Machine], bool], timeout: float = WAIT) -> Machine:
        """Reconcile repeatedly (what the requeues would do) until ``done`` holds."""
        holder: list[Machine] = []

        def step() -> bool:
            self.reconcile(name)
            holder[:] = [self.get(name)]
            return done(holder[0])

        wait_until(step, timeout, interval=0.2, what=f"machine {name}")
        return holder[0]

    def start_kubelet(self) -> None:
        sim = KubeletSimulator(self.api, self.cloud(), heartbeat_interval=0.5, node_grace=2.0)
        stop = threading.Event()
        thread = threading.Thread(target=sim.run, args=(stop, 0.1), daemon=True)
        thread.start()
        self._kubelet.append((stop, thread))

    def close(self) -> None:
        for stop, thread in self._kubelet:
            stop.set()
            thread.join(10)


def phase_is(phase: str) -> Callable[[Machine], bool]:
    return lambda m: m.status.current_status.phase == phase


_crds_installed: set[str] = set()


@pytest.fixture()
def env(apiserver: ApiServer, redis_url: str) -> Iterator[Env]:
    """A fresh namespace and machine-name prefix per test, settings pointing at the sandbox."""
    namespace = f"mc-{uuid.uuid4().hex[:8]}"
    base = {
        **SETTINGS,
        "control_kubeconfig": str(apiserver.kubeconfig),
        "target_kubeconfig": str(apiserver.kubeconfig),
        "redis_url": redis_url,
        "namespace": namespace,
    }
    configure(base)
    reset_clusters()
    api = config.new_client_from_config(config_file=str(apiserver.kubeconfig))
    if str(apiserver.kubeconfig) not in _crds_installed:
        install_crds(api)
        _crds_installed.add(str(apiserver.kubeconfig))
    rest.request(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    env = Env(api, namespace, f"m{uuid.uuid4().hex[:6]}", redis_url, base)
    yield env
    env.close()
    api.close()
    reset_clusters()
    reset_settings()


def running_machine(
    env: Env, base: str, cls: str, labels: dict[str, str] | None = None, **spec: object
) -> str:
    name = env.name(base)
    env.machine(name, cls, labels=labels, **spec)
    env.reconcile_until(name, phase_is("Running"))
    return name


@pytest.fixture()
def every_request_runs(env: Env) -> None:
    """No coalescing window (``debounce``), for tests that check what one run does, run after run:
    a module asks for it with ``pytest.mark.usefixtures("every_request_runs")``."""
    env.base_settings["safety_event_min_interval"] = "0s"
    env.settings()
