"""A MachineDeployment driven and watched as an SRE would: through the control and target kubeconfigs
only. The demo, the compose test and the chart's RBAC test roll a fleet with it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table

from mcm_tasks.api.constants import GROUP, VERSION

#: the phases in the order a machine passes them (the fleet view's columns)
PHASES = ("Pending", "Available", "Running", "Unknown", "Failed", "Terminating")
NO_PHASE = "(creating)"


def machine_class(name: str, instance_type: str, namespace: str, secret: str) -> dict[str, Any]:
    """A MachineClass of the local provider (VMs in Redis, played by the kubelet simulator)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": namespace},
        "provider": "local",
        "providerSpec": {"bootDelaySeconds": 1, "machineType": instance_type},
        "secretRef": {"name": secret, "namespace": namespace},
        "nodeTemplate": {
            "capacity": {"cpu": "2", "gpu": "0", "memory": "4Gi"},
            "instanceType": instance_type,
            "region": "local",
            "zone": "local-a",
        },
    }


def machine_deployment(name: str, namespace: str, replicas: int, klass: str) -> dict[str, Any]:
    labels = {"name": name}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "minReadySeconds": 0,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"class": {"kind": "MachineClass", "name": klass}},
            },
        },
    }


def phase_of(machine: dict[str, Any]) -> str:
    return str(machine.get("status", {}).get("currentStatus", {}).get("phase") or NO_PHASE)


def owner_of(machine: dict[str, Any]) -> str:
    owners = machine["metadata"].get("ownerReferences") or []
    return str(owners[0]["name"]) if owners else "(no MachineSet)"


def phases_by_set(machines: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    """Machines counted by phase, per owning MachineSet: the fleet view's rows."""
    out: dict[str, Counter[str]] = {}
    for m in machines:
        out.setdefault(owner_of(m), Counter())[phase_of(m)] += 1
    return dict(sorted(out.items()))


def fleet_table(title: str, machines: list[dict[str, Any]], sets: list[dict[str, Any]], nodes: int) -> Table:
    """Machines by phase per MachineSet, with each set's class and desired replicas."""
    by_set = phases_by_set(machines)
    info = {s["metadata"]["name"]: s for s in sets}
    table = Table(title=title, title_justify="left")
    table.add_column("MachineSet")
    table.add_column("class")
    table.add_column("desired", justify="right")
    columns = [p for p in (NO_PHASE, *PHASES) if any(c[p] for c in by_set.values())] or ["Running"]
    for phase in columns:
        table.add_column(phase, justify="right")
    for name in sorted(set(by_set) | set(info)):
        spec = info.get(name, {}).get("spec", {})
        klass = spec.get("template", {}).get("spec", {}).get("class", {}).get("name", "")
        counts = by_set.get(name, Counter())
        table.add_row(name, klass, str(spec.get("replicas", "")), *(str(counts[p] or "") for p in columns))
    table.caption = f"{len(machines)} machines, {nodes} nodes in the target cluster"
    return table


class Fleet:
    """One namespace of a control cluster and the target cluster's nodes, through kubeconfigs."""

    def __init__(self, control_kubeconfig: Path, target_kubeconfig: Path, namespace: str = "default") -> None:
        from kubernetes import client, config

        self.namespace = namespace
        self.control = config.new_client_from_config(config_file=str(control_kubeconfig))
        self.target = config.new_client_from_config(config_file=str(target_kubeconfig))
        self.custom = client.CustomObjectsApi(self.control)
        self.core = client.CoreV1Api(self.control)
        self.nodes_api = client.CoreV1Api(self.target)

    def close(self) -> None:
        self.control.close()
        self.target.close()

    def _list(self, plural: str) -> list[dict[str, Any]]:
        listed: Any = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, plural)
        return sorted(listed["items"], key=lambda m: m["metadata"]["name"])

    def machines(self) -> list[dict[str, Any]]:
        return self._list("machines")

    def machine_sets(self) -> list[dict[str, Any]]:
        return self._list("machinesets")

    def nodes(self) -> list[Any]:
        return list(self.nodes_api.list_node().items)

    def view(self, title: str) -> Table:
        return fleet_table(title, self.machines(), self.machine_sets(), len(self.nodes()))

    def create_secret(self, name: str) -> None:
        from kubernetes import client

        secret = client.V1Secret(
            metadata=client.V1ObjectMeta(name=name, namespace=self.namespace),
            string_data={"userData": "#!/bin/sh\necho hello <<MACHINE_NAME>>\n"},
        )
        self.core.create_namespaced_secret(self.namespace, secret)

    def create(self, plural: str, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, body)

    def scale(self, name: str, replicas: int) -> None:
        self.custom.patch_namespaced_custom_object_scale(
            GROUP, VERSION, self.namespace, "machinedeployments", name, {"spec": {"replicas": replicas}}
        )

    def set_class(self, name: str, klass: str) -> None:
        body = {"spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": klass}}}}}
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "machinedeployments", name, body
        )

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "machinedeployments", name
        )

    def running(self, count: int, klass: str | None = None) -> Callable[[], bool]:
        """Exactly ``count`` machines, all Running (of ``klass`` if given), and as many nodes."""

        def check() -> bool:
            machines = self.machines()
            ok = [
                m
                for m in machines
                if phase_of(m) == "Running" and (klass is None or m["spec"]["class"]["name"] == klass)
            ]
            return len(ok) == count == len(machines) and len(self.nodes()) == count

        return check
