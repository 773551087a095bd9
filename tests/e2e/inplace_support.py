"""The in-place e2e modules' pool: a MachineDeployment of the InPlaceUpdate strategy over the sandbox's
local cloud, its two MachineClasses (the old and the new OS version), and what the tests look at
(machines, sets, Nodes, the Events that tell what became of a machine)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from kubernetes.client import ApiClient

from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.kube import ops
from tests.e2e.support import connected

NS = "default"
WAIT = 120.0


class Pool:
    def __init__(self, clients: tuple[ApiClient, ApiClient, redis.Redis]) -> None:
        self.control, self.target, self.redis = clients

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
        last: list[Any] = []

        def check() -> bool:
            last[:] = [self.snapshot()]
            return predicate()

        try:
            wait_until(check, timeout, interval=0.3, what=what)
        except TimeoutError as err:
            raise AssertionError(f"{what}: last seen {last}") from err

    def snapshot(self) -> dict[str, Any]:
        sets = {
            ms["metadata"]["name"]: (ms["spec"]["replicas"], sorted(ms["metadata"].get("labels") or {}))
            for ms in ops.list_(self.control, kinds.MACHINE_SET.resource, NS)["items"]
        }
        return {"sets": sets, "machines": self.machine_phases()}

    def machine_phases(self) -> dict[str, Any]:
        return {
            m["metadata"]["name"]: (
                ((m.get("status") or {}).get("currentStatus") or {}).get("phase"),
                next((r["name"] for r in m["metadata"].get("ownerReferences") or []), None),
            )
            for m in ops.list_(self.control, kinds.MACHINE.resource, NS)["items"]
        }

    def deployment(
        self,
        name: str,
        replicas: int,
        orchestration: str,
        max_unavailable: int = 1,
        max_surge: int = 0,
        update_timeout: str | None = None,
    ) -> None:
        body: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": "MachineDeployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"pool": name}},
                "strategy": {
                    "type": "InPlaceUpdate",
                    "inPlaceUpdate": {
                        "maxSurge": max_surge,
                        "maxUnavailable": max_unavailable,
                        "orchestrationType": orchestration,
                    },
                },
                "template": {
                    "metadata": {"labels": {"pool": name}},
                    "spec": {
                        "class": {"kind": "MachineClass", "name": "inplace"},
                        "nodeTemplate": {"metadata": {"labels": {"os-version": "1"}}},
                    },
                },
            },
        }
        if update_timeout is not None:
            body["spec"]["template"]["spec"]["inPlaceUpdateTimeout"] = update_timeout
        ops.create(self.control, kinds.MACHINE_DEPLOYMENT.resource, body)
        self.wait(lambda: len(self.running(name)) == replicas, f"{replicas} machines of {name} Running")

    def update(self, name: str) -> None:
        """A new template: another class (the OS version), and the nodes' version label."""
        template = {
            "class": {"kind": "MachineClass", "name": "inplace-v2"},
            "nodeTemplate": {"metadata": {"labels": {"os-version": "2"}}},
        }
        ops.patch(
            self.control,
            kinds.MACHINE_DEPLOYMENT.resource,
            name,
            {"spec": {"template": {"spec": template}}},
            NS,
        )

    def machines(self, pool: str) -> list[dict[str, Any]]:
        return list(
            ops.list_(self.control, kinds.MACHINE.resource, NS, label_selector=f"pool={pool}")["items"]
        )

    def running(self, pool: str) -> list[str]:
        return sorted(
            m["metadata"]["name"]
            for m in self.machines(pool)
            if ((m.get("status") or {}).get("currentStatus") or {}).get("phase") == "Running"
            and not m["metadata"].get("deletionTimestamp")
        )

    def phase(self, name: str) -> str:
        found = ops.get(self.control, kinds.MACHINE.resource, name, NS, missing_ok=True) or {}
        return str(((found.get("status") or {}).get("currentStatus") or {}).get("phase") or "")

    def sets(self, pool: str) -> list[dict[str, Any]]:
        owned = [
            ms
            for ms in ops.list_(self.control, kinds.MACHINE_SET.resource, NS)["items"]
            if any(r.get("name") == pool for r in ms["metadata"].get("ownerReferences") or [])
        ]
        return sorted(
            owned, key=lambda ms: ms["metadata"]["annotations"].get("deployment.kubernetes.io/revision", "")
        )

    def story(self, names: list[str]) -> list[str]:
        """The Events about these machines, oldest first: what became of one that is gone."""
        events = ops.list_(self.control, kinds.EVENT.resource, NS)["items"]
        return [
            f"{(e.get('involvedObject') or {}).get('name')} {e.get('reason')}: {e.get('message')}"
            for e in sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
            if (e.get("involvedObject") or {}).get("name") in names
            or any(name in str(e.get("message") or "") for name in names)
        ]

    def owner(self, machine: dict[str, Any]) -> str:
        return next((r["name"] for r in machine["metadata"].get("ownerReferences") or []), "")

    def node(self, name: str) -> dict[str, Any]:
        return ops.get(self.target, kinds.NODE.resource, name) or {}

    def taint_keys(self, name: str) -> set[str]:
        return {str(t.get("key")) for t in (self.node(name).get("spec") or {}).get("taints") or ()}

    def node_labels(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("labels") or {})

    def rolled(self, pool: str, replicas: int) -> bool:
        sets = self.sets(pool)
        if len(sets) < 2:
            return False
        new = sets[-1]["metadata"]["name"]
        machines = [m for m in self.machines(pool) if not m["metadata"].get("deletionTimestamp")]
        return (
            len(machines) == replicas
            and all(self.owner(m) == new for m in machines)
            and len(self.running(pool)) == replicas
            and all(ms["spec"]["replicas"] == 0 for ms in sets[:-1])
        )


@contextmanager
def pool_in(sandbox: Sandbox) -> Iterator[Pool]:
    """A ``Pool`` connected to the sandbox, with the secret and the two classes its deployments use."""
    with connected(sandbox) as clients:
        made = Pool(clients)
        user_data = base64.b64encode(b"#!/bin/sh\n").decode()
        ops.create(
            made.control,
            kinds.SECRET.resource,
            {"metadata": {"name": "inplace-secret", "namespace": NS}, "data": {"userData": user_data}},
        )
        for cls in ("inplace", "inplace-v2"):
            ops.create(
                made.control,
                kinds.MACHINE_CLASS.resource,
                {
                    "apiVersion": API_VERSION,
                    "kind": "MachineClass",
                    "metadata": {"name": cls, "namespace": NS},
                    "provider": "local",
                    "providerSpec": {},
                    "secretRef": {"name": "inplace-secret", "namespace": NS},
                },
            )
        yield made
