"""``make demo``: the whole lifecycle on the embedded sandbox, in about a minute.

Starts the sandbox (Redis, control and target API servers, kubelet simulator, informer, workers,
beat), then drives a MachineDeployment the way an SRE would: create 3 machines, scale to 5, roll
to a new MachineClass, scale to 2, delete. Every step waits with a bounded poll on what the
clusters and the local cloud show, and prints it. Exits 0 when done; ``--keep`` leaves the
sandbox running for ``kubectl --kubeconfig DIR/kubeconfig get mcd,mcs,mc``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

console = Console()
GROUP, VERSION = "machine.sapcloud.io", "v1alpha1"
NS = "default"
MCD = "machinedeployments"

#: compressed time: the demo must not wait minutes for anything
DEMO_ENV = {
    "MCM_SHORT_RETRY": "1s",
    "MCM_MEDIUM_RETRY": "3s",
    "MCM_LONG_RETRY": "10s",
    "MCM_HEALTH_RECHECK_PERIOD": "1s",
    "MCM_MACHINE_CREATION_TIMEOUT": "2m",
    "MCM_MACHINE_HEALTH_TIMEOUT": "1m",
    "MCM_MACHINE_DRAIN_TIMEOUT": "30s",
    "MCM_POD_EVICTION_RETRY_INTERVAL": "1s",
    "MCM_MIN_RESYNC_PERIOD": "5m",
    "MCM_KUBELET_HEARTBEAT_INTERVAL": "5",
}


def _class(name: str, instance_type: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": NS},
        "provider": "local",
        "providerSpec": {"bootDelaySeconds": 1, "machineType": instance_type},
        "secretRef": {"name": "demo-secret", "namespace": NS},
        "nodeTemplate": {
            "capacity": {"cpu": "2", "gpu": "0", "memory": "4Gi"},
            "instanceType": instance_type,
            "region": "local",
            "zone": "local-a",
        },
    }


def _deployment(replicas: int) -> dict[str, Any]:
    labels = {"name": "demo"}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MachineDeployment",
        "metadata": {"name": "demo", "namespace": NS},
        "spec": {
            "replicas": replicas,
            "minReadySeconds": 0,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"class": {"kind": "MachineClass", "name": "demo-small"}},
            },
        },
    }


class Demo:
    def __init__(self, directory: Path) -> None:
        from kubernetes import client, config

        self.dir = directory
        self.control = config.new_client_from_config(config_file=str(directory / "kubeconfig"))
        self.target = config.new_client_from_config(config_file=str(directory / "target-kubeconfig"))
        self.custom = client.CustomObjectsApi(self.control)
        self.core = client.CoreV1Api(self.control)
        self.nodes_api = client.CoreV1Api(self.target)

    def machines(self) -> list[dict[str, Any]]:
        listed: Any = self.custom.list_namespaced_custom_object(GROUP, VERSION, NS, "machines")
        return sorted(listed["items"], key=lambda m: m["metadata"]["name"])

    def nodes(self) -> list[Any]:
        return list(self.nodes_api.list_node().items)

    def vms(self) -> list[Any]:
        """VMs of the local cloud that are not terminating or gone."""
        from mcm_sandbox.runner import Sandbox
        from mcm_tasks.redisdb import get_redis
        from providers.local.cloud import LocalCloud

        client = get_redis(Sandbox.load(self.dir).redis_url)
        return [vm for vm in LocalCloud(client).all() if vm.live()]

    def show(self, title: str) -> None:
        table = Table(title=title, show_lines=False)
        for col in ("machine", "phase", "node", "class", "providerID"):
            table.add_column(col)
        for m in self.machines():
            status = m.get("status", {}).get("currentStatus", {})
            table.add_row(
                m["metadata"]["name"],
                status.get("phase", "") or "(creating)",
                m["metadata"].get("labels", {}).get("node", ""),
                m["spec"]["class"]["name"],
                m["spec"].get("providerID", ""),
            )
        console.print(table)
        console.print(f"nodes in target cluster: {len(self.nodes())}   VMs in local cloud: {len(self.vms())}")

    def running(self, count: int, klass: str | None = None) -> Callable[[], bool]:
        def check() -> bool:
            ms = self.machines()
            ok = [
                m
                for m in ms
                if m.get("status", {}).get("currentStatus", {}).get("phase") == "Running"
                and (klass is None or m["spec"]["class"]["name"] == klass)
            ]
            return len(ok) == count and len(ms) == count and len(self.nodes()) == count

        return check

    def step(self, title: str, action: Callable[[], None], done: Callable[[], bool], timeout: float) -> None:
        console.rule(f"[bold]{title}")
        start = time.monotonic()
        action()
        from mcm_sandbox.procs import wait_until

        try:
            wait_until(done, timeout, interval=0.5, what=title)
        except TimeoutError:
            self.show(f"{title}: timed out after {timeout:.0f}s")
            raise
        self.show(f"{title}: done in {time.monotonic() - start:.1f}s")

    def create(self, plural: str, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, NS, plural, body)

    def scale(self, replicas: int) -> None:
        body = {"spec": {"replicas": replicas}}
        self.custom.patch_namespaced_custom_object_scale(
            GROUP, VERSION, NS, "machinedeployments", "demo", body
        )

    def set_class(self, name: str) -> None:
        body = {"spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": name}}}}}
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, NS, MCD, "demo", body)

    def run(self) -> None:
        from kubernetes import client

        secret = client.V1Secret(
            metadata=client.V1ObjectMeta(name="demo-secret", namespace=NS),
            string_data={"userData": "#!/bin/sh\necho demo <<MACHINE_NAME>>\n"},
        )
        self.core.create_namespaced_secret(NS, secret)
        for name, itype in (("demo-small", "local.small"), ("demo-large", "local.large")):
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, NS, "machineclasses", _class(name, itype)
            )

        def create() -> None:
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, NS, "machinedeployments", _deployment(3)
            )

        self.step("create a MachineDeployment of 3", create, self.running(3), 120)
        self.step("scale to 5", lambda: self.scale(5), self.running(5), 120)
        self.step(
            "roll out to MachineClass demo-large (maxSurge 1, maxUnavailable 0)",
            lambda: self.set_class("demo-large"),
            self.running(5, "demo-large"),
            240,
        )
        self.step("scale to 2", lambda: self.scale(2), self.running(2, "demo-large"), 120)

        def delete() -> None:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, MCD, "demo")

        def all_gone() -> bool:
            return not self.machines() and not self.nodes() and not self.vms()

        self.step("delete the MachineDeployment", delete, all_gone, 120)


def main(
    keep: bool = typer.Option(False, "--keep", help="Leave the sandbox running afterwards."),
    dir: Path = typer.Option(None, "--dir", help="Sandbox folder (default: a new temporary one)."),
    workers: int = typer.Option(2, help="Worker processes."),
) -> None:
    directory = dir or Path(tempfile.mkdtemp(prefix="mcm-demo-"))
    for key, value in DEMO_ENV.items():
        os.environ.setdefault(key, value)
    from mcm_sandbox.runner import down, up

    console.rule("[bold]mcm-tasks demo")
    console.print(f"starting the sandbox in {directory} (Redis, 2 API servers, kubelets, informer, workers)")
    up(directory, workers=workers, echo=console.print)
    ok = False
    try:
        Demo(directory).run()
        ok = True
    finally:
        if keep:
            console.print(
                f"\nsandbox left running: source {directory}/env; "
                f"kubectl --kubeconfig {directory}/kubeconfig get mcd,mcs,mc\n"
                f"stop it with: mcm-tasks sandbox down --dir {directory}"
            )
        else:
            down(directory, echo=console.print)
    console.rule("[bold green]demo finished" if ok else "[bold red]demo failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    typer.run(main)
