"""Harness for the MachineDeployment tests (no tests here): the MachineDeployment and MachineSet
reconcilers called in-process on the process's clusters and a real Redis, and a stand-in for the
machine controller that boots machines (phase Running, a Node labelled with the machine) when a test
says so and removes the MCM finalizer of deleted machines. The ``world`` fixture here (tests/unit/)
puts the recording fake (tests/kube_fake.py) there; tests/integration/machinedeployment_support.py
the sandbox API server, for the tests that need the server itself. Without informers every read
goes to the cluster; expectations expire at once so the MachineSet acts on every pass."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from kubernetes.client import ApiClient

from mcm_sandbox.testing.standins import finish_deletions
from mcm_tasks import kinds
from mcm_tasks.api import MachineDeployment, MachineSet, Obj
from mcm_tasks.api.constants import (
    CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION,
    MCM_FINALIZER,
    NODE_LABEL_KEY,
)
from mcm_tasks.controllers.machinedeployment.reconcile import reconcile_machine_deployment
from mcm_tasks.controllers.machineset.reconcile import reconcile_machine_set
from mcm_tasks.kube import ops
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import configure, get_settings, reset_settings
from tests.kube_fake import FakeKube

SETTINGS: dict[str, Any] = {
    "short_retry": 0.2,
    "medium_retry": 1.0,
    "long_retry": 5.0,
    "resource_exhausted_retry": 5.0,
    "class_resync_period": 5.0,
    "visibility_timeout": 60.0,
    "expectations_timeout": 0.001,
    # the World runs set passes back to back as decisions: a pass that took 0.17 s of CPU on a
    # loaded host (a full collection, a lazy import) would hand the next one back unrun (see the
    # MachineSet harness, tests/machineset_support.py; the spacing is tested on its own)
    "machine_set_pass_spacing": 0.0,
}
LABELS = {"name": "pool"}


def template(class_name: str = "class-v1", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": dict(LABELS)},
        "spec": {"class": {"kind": "MachineClass", "name": class_name}, **spec},
    }


def deployment_body(
    name: str,
    replicas: int,
    *,
    strategy: str = "RollingUpdate",
    surge: int | str | None = 2,
    unavailable: int | str | None = 1,
    tmpl: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    strat: dict[str, Any] = {"type": strategy}
    if strategy == "RollingUpdate":
        strat["rollingUpdate"] = {"maxSurge": surge, "maxUnavailable": unavailable}
    if strategy == "InPlaceUpdate":
        strat["inPlaceUpdate"] = {
            "maxSurge": surge,
            "maxUnavailable": unavailable,
            "orchestrationType": "Auto",
        }
    return {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(LABELS)},
            "strategy": strat,
            "template": tmpl or template(),
            **spec,
        },
    }


@dataclass
class World:
    api: ApiClient
    namespace: str
    name: str = "pool"
    #: the largest machine count and smallest available count seen by ``check``
    seen_max_total: int = 0
    seen_min_available: int = 1 << 30
    log: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    # --- objects -------------------------------------------------------------------------------------

    def create(self, body: dict[str, Any]) -> MachineDeployment:
        self.name = body["metadata"]["name"]
        return MachineDeployment.model_validate(
            ops.create(self.api, kinds.MACHINE_DEPLOYMENT.resource, body, self.namespace)
        )

    def deployment(self) -> MachineDeployment | None:
        data = ops.get(
            self.api, kinds.MACHINE_DEPLOYMENT.resource, self.name, self.namespace, missing_ok=True
        )
        return None if data is None else MachineDeployment.model_validate(data)

    def patch(self, body: dict[str, Any]) -> None:
        ops.patch(self.api, kinds.MACHINE_DEPLOYMENT.resource, self.name, body, self.namespace)

    def sets(self) -> list[MachineSet]:
        items = ops.list_(self.api, kinds.MACHINE_SET.resource, self.namespace)["items"]
        return sorted(
            (MachineSet.model_validate(i) for i in items), key=lambda s: s.metadata.creation_timestamp or 0
        )

    def machines(self) -> list[dict[str, Any]]:
        return list(ops.list_(self.api, kinds.MACHINE.resource, self.namespace)["items"])

    def machines_of(self, machine_set: MachineSet) -> list[dict[str, Any]]:
        return [m for m in self.machines() if _controller_uid(m) == machine_set.metadata.uid]

    def node(self, name: str) -> dict[str, Any] | None:
        return ops.get(self.api, kinds.NODE.resource, name, missing_ok=True)

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        items = ops.list_(self.api, kinds.EVENT.resource, self.namespace)["items"]
        mine = [e for e in items if (e.get("involvedObject") or {}).get("name") == self.name]
        return [e for e in mine if reason is None or e.get("reason") == reason]

    def reconfigure(self, **overrides: Any) -> None:
        configure({**get_settings().model_dump(), **overrides})

    # --- controllers ---------------------------------------------------------------------------------

    def reconcile(self) -> Requeue | None:
        return reconcile_machine_deployment(self.key)

    def reconcile_sets(self) -> None:
        """The MachineSet reconciles, and the machine controller's last deletion step on the machines
        they deleted (their MCM finalizer), as its deletion flow would do."""
        for ms in self.sets():
            reconcile_machine_set(f"{self.namespace}/{ms.metadata.name}")
        finish_deletions(self.api, self.namespace)

    def boot(self, count: int | None = None, machine_set: MachineSet | None = None) -> int:
        """The machine controller's part: new machines become Running with a Node of their name."""
        booted = 0
        for machine in self.machines() if machine_set is None else self.machines_of(machine_set):
            if count is not None and booted >= count:
                break
            meta = machine["metadata"]
            phase = ((machine.get("status") or {}).get("currentStatus") or {}).get("phase")
            if phase or meta.get("deletionTimestamp"):
                continue
            name = meta["name"]
            if self.node(name) is None:
                ops.create(
                    self.api,
                    kinds.NODE.resource,
                    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}},
                )
            ops.patch(
                self.api,
                kinds.MACHINE.resource,
                name,
                {"metadata": {"labels": {NODE_LABEL_KEY: name}}},
                self.namespace,
            )
            fresh = ops.get(self.api, kinds.MACHINE.resource, name, self.namespace)
            assert fresh is not None
            fresh["status"] = {"currentStatus": {"phase": "Running"}}
            ops.update_status(self.api, kinds.MACHINE.resource, fresh, self.namespace)
            booted += 1
        return booted

    def check(self, total_limit: int, min_available: int) -> None:
        """The budgets over the machine objects as they are now."""
        machines = self.machines()
        total = len(machines)
        available = sum(
            1 for m in machines if _phase(m) == "Running" and not m["metadata"].get("deletionTimestamp")
        )
        self.seen_max_total = max(self.seen_max_total, total)
        self.seen_min_available = min(self.seen_min_available, available)
        assert total <= total_limit, f"{total} machines > {total_limit}"
        assert available >= min_available, f"{available} available < {min_available}"

    def settle(self, *, boot: bool = True, rounds: int = 40, until: Any = None) -> None:
        """Run the controllers (and boot machines) until ``until()`` holds (default: the deployment
        reports a complete rollout); bounded by ``rounds``."""
        done = until or self.complete
        for _ in range(rounds):
            self.reconcile()
            self.reconcile_sets()
            if boot:
                self.boot()
                self.reconcile_sets()
            if done():
                self.reconcile()
                return
        raise AssertionError(f"not settled after {rounds} rounds: {self.describe()}")

    def complete(self) -> bool:
        d = self.deployment()
        if d is None:
            return False
        s = d.status
        replicas = d.spec.replicas
        reason = next((c.reason for c in s.conditions if c.type == "Progressing"), "")
        return (
            s.updated_replicas == s.replicas == s.available_replicas == replicas
            and reason == "NewMachineSetAvailable"
            and len(self.machines()) == replicas
        )

    def describe(self) -> str:
        d = self.deployment()
        sets = ", ".join(
            f"{s.metadata.name}:{s.spec.replicas}/{s.status.replicas}/{s.status.available_replicas}"
            for s in self.sets()
        )
        status = "" if d is None else d.status.model_dump_json(exclude_none=True)
        return f"sets {sets}; deployment status {status}"


def _controller_uid(obj: dict[str, Any]) -> str | None:
    ref = next((r for r in obj["metadata"].get("ownerReferences") or () if r.get("controller")), None)
    return None if ref is None else ref.get("uid")


def _phase(machine: dict[str, Any]) -> str:
    return str(((machine.get("status") or {}).get("currentStatus") or {}).get("phase") or "")


@pytest.fixture()
def world(redis_url: str) -> Iterator[World]:
    """A World on a ``FakeKube`` installed as the process's clusters, in a namespace of its own.
    Its clock ticks a second a create, so that the sets (ordered by age) have ages to tell apart."""
    namespace = f"mcd-{uuid.uuid4().hex[:8]}"
    configure({**SETTINGS, "redis_url": redis_url, "namespace": namespace})
    try:
        with FakeKube(tick=timedelta(seconds=1)).installed() as kube:
            yield World(kube, namespace)
    finally:
        reset_settings()


def _annotations(obj: Obj | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def _mcm_protected(node: Obj | None) -> bool:
    return _annotations(node).get(CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION) == "true"


def _node_names(world: World, machine_set: MachineSet) -> list[str]:
    return sorted(m["metadata"]["name"] for m in world.machines_of(machine_set))


def _local_class(world: World, name: str) -> None:
    """A local-provider MachineClass of that name (the deployment's), reconciled (finalizer on)."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{name}-secret", "namespace": world.namespace},
        "data": {"userData": base64.b64encode(b"#!/bin/sh\n").decode()},
    }
    ops.create(world.api, kinds.SECRET.resource, secret, world.namespace)
    body = {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        # the finalizer the class reconcile writes once machines use the class
        "metadata": {"name": name, "namespace": world.namespace, "finalizers": [MCM_FINALIZER]},
        "provider": "local",
        "providerSpec": {},
        "secretRef": {"name": f"{name}-secret", "namespace": world.namespace},
    }
    ops.create(world.api, kinds.MACHINE_CLASS.resource, body, world.namespace)


def _joined(world: World, name: str) -> None:
    """What the harness's boot leaves out for the machine controller: the VM's providerID (so the
    machine is past creation) and a Ready node (so the health check keeps it Running)."""
    ops.patch(
        world.api, kinds.MACHINE.resource, name, {"spec": {"providerID": f"local:///{name}"}}, world.namespace
    )
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
    }
    ops.patch(world.api, kinds.NODE.resource, name, {"status": {"conditions": [ready]}}, subresource="status")
    ops.patch(
        world.api, kinds.NODE.resource, name, {"metadata": {"labels": {"kubernetes.io/hostname": name}}}
    )
