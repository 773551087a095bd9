"""The clients and helpers of the machine and deletion end-to-end tests (one sandbox per module)."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from typing import Any

import redis
from kubernetes.client import ApiClient

from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION, Machine
from mcm_tasks.controllers.machine.drain.state_io import PodProgress, drain_key
from mcm_tasks.kube import ops
from providers.local import CSI_DRIVER, LocalCloud

NS = "default"
#: compressed time; every process serves all reconcilers. The global drain timeout is long so that a
#: holding budget holds; tests that want the drain forced give their machine ``drainTimeout`` "5s".
ENV = {
    "MCM_LONG_RETRY": "5s",
    "MCM_MACHINE_DRAIN_TIMEOUT": "180s",
    "MCM_FORCE_DRAIN_TIMEOUT": "5s",
    "MCM_POD_EVICTION_RETRY_INTERVAL": "0.5s",
    "MCM_MACHINE_PV_DETACH_TIMEOUT": "20s",
    "MCM_MACHINE_PV_REATTACH_TIMEOUT": "0.5s",
}
WAIT = 60.0
USER_DATA = base64.b64encode(b"#!/bin/sh\necho <<MACHINE_NAME>>\n").decode()


class World:
    def __init__(self, sandbox: Sandbox, clients: tuple[ApiClient, ApiClient, redis.Redis]) -> None:
        self.sandbox = sandbox
        self.control, self.target, self.redis = clients

    def secret(self, name: str, data: dict[str, str] | None = None) -> None:
        body = {"metadata": {"name": name, "namespace": NS}, "data": data or {"userData": USER_DATA}}
        ops.create(self.control, kinds.SECRET.resource, body)

    def machine_class(self, name: str, provider_spec: dict[str, Any] | None = None, secret: str = "") -> None:
        if not secret:
            secret = f"{name}-secret"
            self.secret(secret)
        body = {
            "apiVersion": API_VERSION,
            "kind": "MachineClass",
            "metadata": {"name": name, "namespace": NS},
            "provider": "local",
            "providerSpec": provider_spec or {},
            "secretRef": {"name": secret, "namespace": NS},
        }
        ops.create(self.control, kinds.MACHINE_CLASS.resource, body)

    def machine(
        self, name: str, cls: str, labels: dict[str, str] | None = None, finalizers: list[str] | None = None
    ) -> None:
        metadata: dict[str, Any] = {"name": name, "namespace": NS, "labels": labels or {}}
        if finalizers:
            metadata["finalizers"] = finalizers
        body = {
            "apiVersion": API_VERSION,
            "kind": "Machine",
            "metadata": metadata,
            "spec": {"class": {"kind": "MachineClass", "name": cls}},
        }
        ops.create(self.control, kinds.MACHINE.resource, body)

    def get(self, name: str) -> Machine | None:
        found = ops.get(self.control, kinds.MACHINE.resource, name, NS, missing_ok=True)
        return None if found is None else Machine.model_validate(found)

    def phase(self, name: str) -> str:
        m = self.get(name)
        return "" if m is None else str(m.status.current_status.phase)

    def node(self, name: str) -> dict[str, Any] | None:
        return ops.get(self.target, kinds.NODE.resource, name, missing_ok=True)

    def live_vms(self, machine: str) -> list[Any]:
        return [vm for vm in LocalCloud(self.redis).by_machine(machine) if vm.live()]

    def reasons(self, name: str) -> set[str]:
        items = ops.list_(self.control, kinds.EVENT.resource, NS)["items"]
        return {str(e.get("reason")) for e in items if (e.get("involvedObject") or {}).get("name") == name}

    @staticmethod
    def list_rv(api: ApiClient, res: Any) -> str:
        return str(ops.list_(api, res, NS if res.namespaced else None)["metadata"]["resourceVersion"])

    @staticmethod
    def metadata_updates(api: ApiClient, res: Any, name: str, since: str, *, status: bool = False) -> int:
        """How many updates of one object the server recorded since ``since`` that changed its labels,
        annotations, finalizers or spec (and status, when asked): a watch replays them."""
        parts = ("metadata", "spec", "status") if status else ("metadata", "spec")
        count, last = 0, None
        for kind, obj in ops.watch(
            api, res, NS if res.namespaced else None, resource_version=since, timeout_seconds=1
        ):
            if obj.get("metadata", {}).get("name") != name or kind not in ("ADDED", "MODIFIED"):
                continue
            meta = obj["metadata"]
            seen = (
                meta.get("labels"), meta.get("annotations"), meta.get("finalizers"), obj.get("spec"),
                obj.get("status") if "status" in parts else None,
            )  # fmt: skip
            if kind == "MODIFIED" and last is not None and seen != last:
                count += 1
            last = seen
        return count

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
        wait_until(predicate, timeout, interval=0.2, what=what)

    def wait_phase(self, name: str, phase: str, timeout: float = WAIT) -> Machine:
        self.wait(lambda: self.phase(name) == phase, f"{name} {phase}", timeout)
        found = self.get(name)
        assert found is not None
        return found


class Cluster(World):
    """The machine e2e's world plus what a drain needs: pods, budgets and volumes on the target."""

    def launch(
        self, prefix: str, *, labels: dict[str, str] | None = None, spec: dict[str, Any] | None = None
    ) -> str:
        """A standalone Machine of class ``drain``, Running with its Node registered."""
        name = f"{prefix}-{uuid.uuid4().hex[:5]}"
        body = {
            "apiVersion": API_VERSION,
            "kind": "Machine",
            "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
            "spec": {"class": {"kind": "MachineClass", "name": "drain"}, **(spec or {})},
        }
        ops.create(self.control, kinds.MACHINE.resource, body)
        self.wait_phase(name, "Running")
        self.wait(lambda: self.node(name) is not None, f"node {name}")
        return name

    def run_pod(
        self, name: str, node: str, *, labels: dict[str, str] | None = None, claim: str = "", **spec: Any
    ) -> None:
        body: dict[str, Any] = {
            "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "busybox"}],
                **spec,
            },
        }
        if claim:
            body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        ops.create(self.target, kinds.POD.resource, body)

    def pod(self, name: str) -> dict[str, Any] | None:
        return ops.get(self.target, kinds.POD.resource, name, NS, missing_ok=True)

    def ready(self, *names: str) -> bool:
        def one(pod: dict[str, Any] | None) -> bool:
            conditions = ((pod or {}).get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

        return all(one(self.pod(n)) for n in names)

    def leaving(self, name: str) -> bool:
        found = self.pod(name)
        return found is None or bool(found["metadata"].get("deletionTimestamp"))

    def budget(self, name: str, selector: dict[str, str], **spec: Any) -> None:
        body = {
            "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"matchLabels": selector}, **spec},
        }
        ops.create(self.target, kinds.POD_DISRUPTION_BUDGET.resource, body)

    def budget_status(self, name: str) -> dict[str, Any]:
        return dict(
            (ops.get(self.target, kinds.POD_DISRUPTION_BUDGET.resource, name, NS) or {}).get("status") or {}
        )

    def volume(self, name: str) -> None:
        """A PersistentVolume of the local CSI driver bound to a claim of the same name."""
        pv = {
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": CSI_DRIVER, "volumeHandle": f"vol-{name}"},
                "claimRef": {"namespace": NS, "name": name},
            },
        }
        ops.create(self.target, kinds.PERSISTENT_VOLUME.resource, pv)
        claim = {
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeName": name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        ops.create(self.target, kinds.PERSISTENT_VOLUME_CLAIM.resource, claim)

    def attached(self, node: str) -> list[str]:
        found = ((self.node(node) or {}).get("status") or {}).get("volumesAttached") or []
        return [str(v["name"]) for v in found]

    def messages(self, name: str, reason: str) -> list[str]:
        items = ops.list_(self.control, kinds.EVENT.resource, NS)["items"]
        return [
            str(e.get("message"))
            for e in items
            if (e.get("involvedObject") or {}).get("name") == name and e.get("reason") == reason
        ]

    def delete(self, name: str) -> None:
        ops.delete(self.control, kinds.MACHINE.resource, name, NS)

    def gone(self, name: str) -> bool:
        """Machine and Node deleted, and no VM of it left in the local cloud, not even a terminating one."""
        return (
            self.get(name) is None and self.node(name) is None and not LocalCloud(self.redis).by_machine(name)
        )

    def wait_gone(self, name: str, timeout: float = WAIT) -> None:
        self.wait(lambda: self.gone(name), f"machine, node and VM of {name} gone", timeout)
        assert not self.redis.exists(drain_key(f"{NS}/{name}"))

    def evict_attempts(self, machine: str, pod: str) -> int:
        raw = self.redis.hget(drain_key(f"{NS}/{machine}"), f"pod:{NS}/{pod}")
        return PodProgress.model_validate_json(raw).attempts if raw else 0
