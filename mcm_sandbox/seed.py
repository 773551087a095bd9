"""A seed in the sandbox: one control cluster with shoot namespaces, each shoot a virtual cluster of
one sandbox API-server process, its Nodes played by one kubelet simulator, and one mcm-tasks
installation in seed mode serving them all (``--namespaces`` or ``--namespace-selector``).

Each shoot namespace is laid out as gardenlet lays it out for a shoot's MCM (``lay_out_shoot``): the
generic token kubeconfig Secret (its user only a ``tokenFile``) and the shoot access Secret with the
token, so the installation finds the target cluster exactly as it would on a real seed. Used by
``make demo SHOOTS=N``, ``bench/seed.py`` and the seed-mode end-to-end tests.
"""

from __future__ import annotations

import base64
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config
from kubernetes.client import ApiClient

from mcm_sandbox.procs import ApiServer, ManagedProcess, RedisServer, free_port, http_ok, wait_until
from mcm_sandbox.runner import register_crds
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.kube import ops
from mcm_tasks.kube.target_secret import GENERIC_TOKEN_KUBECONFIG, SHOOT_ACCESS_SECRET, SHOOT_TOKEN_PATH

#: the label ``--namespace-selector`` picks shoot namespaces by, as the sandbox lays them out
SHOOT_LABEL = "seed.mcm-tasks.io/shoot"


def b64(value: str | bytes) -> str:
    return base64.b64encode(value if isinstance(value, bytes) else value.encode()).decode()


def shoot_access(kubeconfig: Path) -> tuple[str, str, str]:
    """A virtual cluster's server URL, CA (base64, may be empty) and token, from its kubeconfig."""
    doc = yaml.safe_load(kubeconfig.read_text())
    cluster = doc["clusters"][0]["cluster"]
    return cluster["server"], cluster.get("certificate-authority-data", ""), doc["users"][0]["user"]["token"]


def lay_out_shoot(
    control: ApiClient,
    namespace: str,
    shoot_kubeconfig: Path,
    labels: Mapping[str, str] | None = None,
    secret_name: str = GENERIC_TOKEN_KUBECONFIG,
) -> None:
    """The shoot namespace as gardenlet leaves it for the shoot's MCM."""
    server, ca, token = shoot_access(shoot_kubeconfig)
    cluster: dict[str, Any] = {"server": server}
    if ca:
        cluster["certificate-authority-data"] = ca
    generic = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": namespace,
        "clusters": [{"name": namespace, "cluster": cluster}],
        "contexts": [{"name": namespace, "context": {"cluster": namespace, "user": namespace}}],
        "users": [{"name": namespace, "user": {"tokenFile": SHOOT_TOKEN_PATH}}],
    }
    labelled = {SHOOT_LABEL: "true", **(labels or {})}
    ops.create(control, kinds.NAMESPACE.resource, {"metadata": {"name": namespace, "labels": labelled}})
    kubeconfig = {"kubeconfig": b64(yaml.safe_dump(generic))}
    ops.create(
        control,
        kinds.SECRET.resource,
        {"metadata": {"name": secret_name, "namespace": namespace}, "data": kubeconfig},
    )
    access = {
        "metadata": {"name": SHOOT_ACCESS_SECRET, "namespace": namespace},
        "data": {"token": b64(token)},
    }
    ops.create(control, kinds.SECRET.resource, access)


def local_class(control: ApiClient, namespace: str, name: str = "local") -> None:
    """A local-cloud MachineClass and its user-data Secret in the namespace."""
    secret = f"{name}-secret"
    body = {"metadata": {"name": secret, "namespace": namespace}, "data": {"userData": b64("#!/bin/sh\n")}}
    ops.create(control, kinds.SECRET.resource, body)
    ops.create(control, kinds.MACHINE_CLASS.resource, {
        "apiVersion": API_VERSION, "kind": "MachineClass", "metadata": {"name": name, "namespace": namespace},
        "provider": "local", "providerSpec": {}, "secretRef": {"name": secret, "namespace": namespace},
    })  # fmt: skip


def machine_deployment(namespace: str, name: str, replicas: int, class_name: str = "local") -> dict[str, Any]:
    labels = {"deployment": name}
    return {
        "apiVersion": API_VERSION, "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"class": {"kind": "MachineClass", "name": class_name}}}},
    }  # fmt: skip


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "mcm_tasks.cli", *args]


@dataclass
class Seed:
    """A running sandbox seed and its mcm-tasks installation (``start`` / ``stop``)."""

    dir: Path
    shoots: list[str]
    workers: int = 2
    #: informer replicas: each runs a shard of the namespaces (``--identity informer-<i>``)
    informers: int = 1
    #: ``MCM_*`` settings of every mcm-tasks process (compressed time, the namespaces to serve)
    env: dict[str, str] = field(default_factory=dict)
    #: serve the shoots by label (``--namespace-selector``) instead of a list (``--namespaces``)
    selector: bool = True
    beat: bool = True
    #: the local cloud's VMs in a Redis of their own (as ``runner.up(cloud_redis=True)``: a real cloud
    #: puts no load on our Redis; the benchmarks count our Redis's CPU and memory without it)
    cloud_redis: bool = False
    redis: RedisServer | None = None
    cloud: RedisServer | None = None
    apiserver: ApiServer | None = None
    procs: dict[str, ManagedProcess] = field(default_factory=dict)
    endpoints: dict[str, str] = field(default_factory=dict)

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def cloud_url(self) -> str:
        """The Redis of the local cloud's VMs: its own with ``cloud_redis``, else ours."""
        return self.cloud.url if self.cloud is not None else self.redis_url

    @property
    def pids(self) -> dict[str, int]:
        """Process id by role, named as ``runner.up`` names them (``bench.figures.OUR_ROLES``)."""
        out: dict[str, int] = {}
        servers = (("redis", self.redis), ("cloud-redis", self.cloud), ("apiserver", self.apiserver))
        for role, server in servers:
            if server is not None and server.process is not None:
                out[role] = server.process.pid
        out.update({name: proc.pid for name, proc in self.procs.items() if proc.proc is not None})
        return out

    @property
    def kubeconfig(self) -> Path:
        assert self.apiserver is not None
        return self.apiserver.kubeconfig

    @property
    def redis_url(self) -> str:
        assert self.redis is not None
        return self.redis.url

    def shoot_kubeconfig(self, shoot: str) -> Path:
        assert self.apiserver is not None
        return self.apiserver.cluster_kubeconfig(shoot)

    def control(self) -> ApiClient:
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def target(self, shoot: str) -> ApiClient:
        return config.new_client_from_config(config_file=str(self.shoot_kubeconfig(shoot)))

    def process_env(self) -> dict[str, str]:
        serving = {"MCM_NAMESPACE_SELECTOR": f"{SHOOT_LABEL}=true"} if self.selector else {
            "MCM_NAMESPACES": ",".join(self.shoots)
        }  # fmt: skip
        cloud = {"MCM_LOCAL_CLOUD_REDIS_URL": self.cloud.url} if self.cloud is not None else {}
        return {
            **os.environ,
            "MCM_REDIS_URL": self.redis_url,
            **cloud,
            "MCM_CONTROL_KUBECONFIG": str(self.kubeconfig),
            "MCM_NAMESPACE": "mcm-seed",
            **serving,
            **self.env,
        }

    def start(self, timeout: float = 90.0) -> Seed:
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self.redis = RedisServer(self.dir / "redis").start(timeout)
            if self.cloud_redis:
                self.cloud = RedisServer(self.dir / "cloud-redis").start(timeout)
            extra: list[str] = []
            for shoot in self.shoots:
                extra += ["--virtual-cluster", shoot]
            self.apiserver = ApiServer(self.logs, name="seed", extra_args=extra).start(timeout)
            register_crds(self.kubeconfig, timeout)
            control = self.control()
            try:
                ops.create(control, kinds.NAMESPACE.resource, {"metadata": {"name": "mcm-seed"}})
                for shoot in self.shoots:
                    self.add_shoot_objects(control, shoot)
            finally:
                control.close()
            self._spawn(
                "kubelet",
                _cli(
                    "sandbox",
                    "kubelet",
                    "--clusters-dir",
                    str(self.apiserver.clusters_dir),
                    "--redis-url",
                    self.cloud_url,
                ),
            )
            for i in range(self.informers):
                beat = ["--beat"] if self.beat and i == 0 else []
                self._spawn(
                    self.informer_name(i), _cli("informer", "--identity", self.informer_name(i), *beat)
                )
            for i in range(self.workers):
                self._spawn(f"worker-{i}", _cli("worker", "--hostname", f"worker-{i}@%h"))
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def informer_name(i: int) -> str:
        return "informer" if i == 0 else f"informer-{i}"

    def add_shoot_objects(self, control: ApiClient, shoot: str) -> None:
        lay_out_shoot(control, shoot, self.shoot_kubeconfig(shoot))
        local_class(control, shoot)

    def add_shoot(self, shoot: str) -> None:
        """A new shoot while the seed runs: its virtual cluster, namespace and Secrets."""
        assert self.apiserver is not None
        self.apiserver.add_cluster(shoot)
        wait_until(self.shoot_kubeconfig(shoot).exists, 10, what=f"{shoot}'s kubeconfig")
        self.shoots.append(shoot)
        control = self.control()
        try:
            self.add_shoot_objects(control, shoot)
        finally:
            control.close()

    def _spawn(self, name: str, args: Sequence[str]) -> None:
        port = free_port()
        env = {**self.process_env(), "MCM_PORT": str(port), "MCM_ADDRESS": "127.0.0.1"}
        proc = ManagedProcess(list(args), self.logs / f"{name}.log", env=env)
        proc.start()
        self.procs[name] = proc
        if name != "kubelet":  # the simulator serves no endpoints
            self.endpoints[name] = f"http://127.0.0.1:{port}"

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout

        def up() -> bool:
            for name, proc in self.procs.items():
                if not proc.alive():
                    raise RuntimeError(f"seed process {name} exited:\n{proc.log_tail()}")
            return all(http_ok(url + "/healthz") for url in self.endpoints.values())

        wait_until(up, max(1.0, deadline - time.monotonic()), what="seed processes healthy")

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()
        self.procs.clear()
        if self.apiserver is not None:
            self.apiserver.stop()
        for server in (self.redis, self.cloud):
            if server is not None:
                server.stop()
