"""The controllers run as the Helm chart deploys them, against two sandbox API servers that enforce
RBAC: the chart rendered for the control cluster (scope=control) and for the target cluster
(scope=target), applied to each, and every process started with the args and environment of its
Deployment, authenticated by a token of its ServiceAccount (beat with none, as the chart mounts
none). Every authorization decision is recorded (tests/e2e/audited_apiserver.py) so a test can
list refused requests and grants nobody used."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, utils

from mcm_sandbox.apiserver.kubeconfig import kubeconfig, service_account_kubeconfig
from mcm_sandbox.procs import ManagedProcess, RedisServer, free_port, wait_until
from mcm_sandbox.runner import register_crds
from tests.chart_support import ROOT, by_kind, render
from tests.e2e.support import COMPRESSED

RELEASE_NS = "mcm-system"
MACHINE_NS = "machines"
#: kinds whose CRDs come with add-ons (KEDA, prometheus-operator), not served by the sandbox
ADDON_KINDS = {"ScaledObject", "TriggerAuthentication", "ServiceMonitor", "PrometheusRule"}
Docs = list[dict[str, Any]]


def sa_user(name: str) -> str:
    return f"system:serviceaccount:{RELEASE_NS}:mcm-tasks-{name}"


@dataclass
class Cluster:
    name: str
    url: str
    admin: Path
    audit: Path
    process: ManagedProcess

    def decisions(self) -> list[dict[str, Any]]:
        if not self.audit.exists():
            return []
        return [json.loads(line) for line in self.audit.read_text().splitlines() if line.strip()]


def start_cluster(workdir: Path, name: str) -> Cluster:
    port = free_port()
    admin = workdir / f"{name}-admin-kubeconfig"
    audit = workdir / f"{name}-audit.jsonl"
    proc = ManagedProcess(
        [sys.executable, "-m", "tests.e2e.audited_apiserver", "--host", "127.0.0.1", "--port", str(port),
         "--kubeconfig", str(admin), "--authorization-mode", "RBAC"],
        workdir / "logs" / f"apiserver-{name}.log",
        env={**os.environ, "MCM_AUDIT_LOG": str(audit), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    proc.start()
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if not proc.alive():
            raise RuntimeError(f"apiserver {name} exited:\n{proc.log_tail()}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=1) as resp:
                return resp.status == 200 and admin.exists()
        except (urllib.error.URLError, OSError):
            return False

    wait_until(ready, 60, what=f"apiserver {name}")
    return Cluster(name, url, admin, audit, proc)


def apply(admin: Path, docs: Docs) -> list[str]:
    """Create every object (as `kubectl apply` of a fresh install); returns what was created."""
    api = config.new_client_from_config(config_file=str(admin))
    created = []
    try:
        with_ns = {d["metadata"].get("namespace") for d in docs} - {None}
        for ns in sorted(with_ns):
            try:
                client.CoreV1Api(api).create_namespace(
                    client.V1Namespace(metadata=client.V1ObjectMeta(name=ns))
                )
            except client.ApiException as err:
                if err.status != 409:
                    raise
        for doc in docs:
            if doc["kind"] in ADDON_KINDS:
                continue
            utils.create_from_dict(api, doc)
            created.append(f"{doc['kind']}/{doc['metadata']['name']}")
    finally:
        api.close()
    return created


def control_values(redis_url: str) -> dict[str, Any]:
    return {
        "scope": "control",
        "controlNamespace": MACHINE_NS,
        "targetCluster": {"kubeconfigSecrets": {"informer": "target-informer", "worker": "target-worker"}},
        "redis": {"bundled": False, "url": redis_url},
    }


def container_env(deployment: dict[str, Any], settings: dict[str, str]) -> dict[str, str]:
    """The plain values of a chart container's env, plus its settings ConfigMap."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    return {**settings, **env}


@dataclass
class ChartWorld:
    workdir: Path
    control: Cluster
    target: Cluster
    redis_url: str
    control_docs: Docs
    target_docs: Docs
    processes: dict[str, ManagedProcess] = field(default_factory=dict)

    def denied(self) -> list[dict[str, Any]]:
        """Requests of the chart's identities (and of credential-less beat) that RBAC refused."""
        return [
            {**d, "cluster": c.name}
            for c in (self.control, self.target)
            for d in c.decisions()
            if not d["allowed"] and d["user"] != "kubernetes-admin"
        ]

    def used(self, cluster: Cluster, component: str) -> set[tuple[str, str, str]]:
        return {
            (d.get("group", ""), d.get("resource", ""), d["verb"])
            for d in cluster.decisions()
            if d["allowed"] and d["user"] == sa_user(component) and "resource" in d
        }

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{p.log_tail(20)}" for n, p in self.processes.items())


def granted(docs: Docs, component: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the chart's Roles and ClusterRoles give one component."""
    out = set()
    for doc in docs:
        if doc["kind"] in ("Role", "ClusterRole") and doc["metadata"]["name"].startswith(
            f"mcm-tasks-{component}"
        ):
            for rule in doc["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        out |= {(group, resource, verb) for verb in rule["verbs"]}
    return out


@contextmanager
def chart_world(workdir: Path, mutate: Callable[[Docs, Docs], None] | None = None) -> Iterator[ChartWorld]:
    """Start everything; ``mutate(control_docs, target_docs)`` may change the rendered RBAC first."""
    with ExitStack() as stack:
        redis = RedisServer(workdir / "redis").start()
        stack.callback(redis.stop)
        control = start_cluster(workdir, "control")
        stack.callback(control.process.stop)
        target = start_cluster(workdir, "target")
        stack.callback(target.process.stop)
        register_crds(control.admin, 60)

        common = ("--namespace", RELEASE_NS, "--release-name", "mcm-tasks")
        control_docs = render(control_values(redis.url), *common, tmp=workdir)
        target_docs = render({"scope": "target"}, *common, tmp=workdir)
        if mutate:
            mutate(control_docs, target_docs)
        apply(control.admin, control_docs)
        apply(target.admin, target_docs)
        world = ChartWorld(workdir, control, target, redis.url, control_docs, target_docs)
        stack.callback(lambda: [p.stop(timeout=5) for p in reversed(list(world.processes.values()))])

        kubeconfigs = {}
        for cluster in (control, target):
            for component in ("informer", "worker"):
                out = workdir / f"{component}-{cluster.name}-kubeconfig"
                service_account_kubeconfig(cluster.admin, RELEASE_NS, f"mcm-tasks-{component}", out)
                kubeconfigs[(component, cluster.name)] = out
            anonymous = workdir / f"anonymous-{cluster.name}-kubeconfig"
            anonymous.write_text(yaml.safe_dump(kubeconfig(cluster.url)))
            kubeconfigs[("beat", cluster.name)] = anonymous

        settings = dict(by_kind(control_docs, "ConfigMap")[0]["data"])
        kubelet = [sys.executable, "-m", "mcm_tasks.cli", "sandbox", "kubelet",
                   "--target-kubeconfig", str(target.admin), "--redis-url", redis.url]  # fmt: skip
        world.processes["kubelet"] = ManagedProcess(
            kubelet, workdir / "logs" / "kubelet.log", env=dict(os.environ)
        )
        world.processes["kubelet"].start()
        replicas = {"worker": 2, "informer": 1, "beat": 1}
        for deployment in by_kind(control_docs, "Deployment"):
            component = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
            args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            for i in range(replicas[component]):
                name = f"{component}-{i}"
                env = {
                    **os.environ,
                    **COMPRESSED,
                    **container_env(deployment, settings),
                    "MCM_REDIS_URL": redis.url,
                    "MCM_CONTROL_KUBECONFIG": str(kubeconfigs[(component, "control")]),
                    "MCM_TARGET_KUBECONFIG": str(kubeconfigs[(component, "target")]),
                    "MCM_ADDRESS": "127.0.0.1",
                    "MCM_PORT": str(free_port()),
                    "POD_NAME": name,
                }
                command = [sys.executable, "-m", "mcm_tasks.cli", *args[1:]]
                command = [a.replace("$(POD_NAME)", name) for a in command]
                proc = ManagedProcess(command, workdir / "logs" / f"{name}.log", env=env)
                proc.start()
                world.processes[name] = proc
        yield world
