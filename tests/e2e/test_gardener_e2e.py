"""The swap a Gardener operator makes: our processes started with Gardener's two MCM command lines,
against API servers that enforce RBAC and serve TLS, as a seed's pod runs them.

- the control cluster through ``--control-kubeconfig=inClusterConfig``: each process sees its
  ServiceAccount exactly as a pod does (``KUBERNETES_SERVICE_HOST``/``PORT``, a projected token and
  CA under ``/var/run/secrets/kubernetes.io/serviceaccount``, laid out and rotated as the kubelet
  does), only under ``MCM_INCLUSTER_ROOT``;
- the target cluster through Gardener's generic kubeconfig: its user has ``tokenFile:``, which the
  test rewrites (Gardener's token-requestor) and whose old token it then revokes;
- RBAC is the chart's (``scope=control`` in the control cluster, ``scope=target`` in the target);
- the informer gets the manager's command line, one worker the provider sidecar's, the other
  worker and beat both merged; each also gets its own ``--port`` last (Gardener's 10258/10259 would
  collide on one host; a later flag wins, as with pflag).

A MachineDeployment scales 3 → 5, rolls to another class, every token (in-cluster and target) is
rotated and the old ones revoked, and it scales down and to 0: with no restart, no key left
failing, the 401s counted in ``mcm_kube_credential_reloads_total`` and logged once per process.

A second test keeps upstream's ``machine-controller-manager`` Lease renewed by another holder (a
Go MCM): a scale does nothing until that holder stops renewing, then completes.
"""

from __future__ import annotations

import io
import os
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from rich.console import Console

from mcm_sandbox.fleet import Fleet, machine_class, machine_deployment
from mcm_sandbox.procs import ManagedProcess, RedisServer, free_port, wait_until
from mcm_sandbox.runner import register_crds
from mcm_tasks import standby
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.queue.stats import read_stats
from mcm_tasks.settings import QUEUES, configure, reset_settings
from tests.chart_support import ROOT, by_kind, render
from tests.credentials_support import (
    ProjectedServiceAccount,
    bound_token,
    generic_kubeconfig,
    revoke,
    server_and_ca,
    write_atomically,
)
from tests.e2e.chart_world import (
    MACHINE_NS,
    RELEASE_NS,
    Cluster,
    apply,
    container_env,
    control_values,
    start_cluster,
)
from tests.e2e.support import COMPRESSED
from tests.integration.leases_support import Rival
from tests.upstream_flags import (
    OLDER_UPSTREAM_FLAGS,
    gardener_manager_command_line,
    gardener_provider_command_line,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

UNAUTHORIZED_LINE = re.compile(r"(control|target) cluster answered 401 Unauthorized")


@dataclass
class Credentials:
    """One component's credentials: its pod's ServiceAccount mount (control) and its generic
    kubeconfig's token file (target), with the Secrets whose deletion revokes the tokens in use."""

    component: str
    mount: ProjectedServiceAccount
    token_file: Path
    kubeconfig: Path
    revocable: dict[str, str] = field(default_factory=dict)  # cluster name → Secret of the live token


@dataclass
class GardenerWorld:
    workdir: Path
    control: Cluster
    target: Cluster
    redis_url: str
    credentials: dict[str, Credentials]
    processes: dict[str, ManagedProcess] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    rotations: int = 0

    def issue(self, component: str) -> None:
        """New tokens for a component in both clusters (Gardener's token-requestor, the kubelet),
        written where the processes read them; the old ones stay valid until ``revoke_old``."""
        creds = self.credentials[component]
        self.rotations += 1
        sa = f"mcm-tasks-{component}"
        for cluster in (self.control, self.target):
            secret = f"{component}-{cluster.name}-token-{self.rotations}"
            token = bound_token(cluster.admin, RELEASE_NS, sa, secret)
            old = creds.revocable.get(cluster.name)
            creds.revocable[cluster.name] = secret
            if cluster is self.control:
                creds.mount.write(token)
            else:
                write_atomically(creds.token_file, token)
            if old:
                creds.revocable[f"old-{cluster.name}"] = old

    def revoke_old(self) -> None:
        for creds in self.credentials.values():
            for cluster in (self.control, self.target):
                old = creds.revocable.pop(f"old-{cluster.name}", None)
                if old:
                    revoke(cluster.admin, RELEASE_NS, old)

    def metric(self, process: str, name: str, labels: dict[str, str]) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[process]}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def log(self, process: str) -> str:
        return (self.workdir / "logs" / f"{process}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{p.log_tail(30)}" for n, p in self.processes.items())


COMMAND_LINES = {
    "informer-0": ("informer", "manager"),
    "worker-0": ("worker", "provider"),
    "worker-1": ("worker", "merged"),
    "beat-0": ("beat", "merged"),
}


def command_line(which: str, target: Path) -> list[str]:
    manager = gardener_manager_command_line(MACHINE_NS, str(target))
    provider = gardener_provider_command_line(MACHINE_NS, str(target))
    return {"manager": manager, "provider": provider, "merged": [*manager, *provider, *OLDER_UPSTREAM_FLAGS]}[
        which
    ]


@contextmanager
def gardener_world(workdir: Path) -> Iterator[GardenerWorld]:
    with ExitStack() as stack:
        redis_server = RedisServer(workdir / "redis").start()
        stack.callback(redis_server.stop)
        control = start_cluster(workdir, "control")
        stack.callback(control.process.stop)
        target = start_cluster(workdir, "target")
        stack.callback(target.process.stop)
        register_crds(control.admin, 60)
        common = ("--namespace", RELEASE_NS, "--release-name", "mcm-tasks")
        control_docs = render(control_values(redis_server.url), *common, tmp=workdir)
        target_docs = render({"scope": "target"}, *common, tmp=workdir)
        apply(control.admin, control_docs)
        apply(target.admin, target_docs)

        control_url, control_ca = server_and_ca(control.admin)
        target_url, target_ca = server_and_ca(target.admin)
        credentials = {}
        for component in ("informer", "worker"):
            mount = ProjectedServiceAccount(workdir / f"pod-{component}", RELEASE_NS, control_ca)
            generic = workdir / f"generic-kubeconfig-{component}"
            kubeconfig = generic_kubeconfig(generic / "kubeconfig", target_url, target_ca)
            credentials[component] = Credentials(component, mount, generic / "token", kubeconfig)
        world = GardenerWorld(workdir, control, target, redis_server.url, credentials)
        for component in credentials:
            world.issue(component)
        stack.callback(lambda: [p.stop(timeout=5) for p in reversed(list(world.processes.values()))])

        kubelet = [sys.executable, "-m", "mcm_tasks.cli", "sandbox", "kubelet",
                   "--target-kubeconfig", str(target.admin), "--redis-url", redis_server.url]  # fmt: skip
        world.processes["kubelet"] = ManagedProcess(
            kubelet, workdir / "logs" / "kubelet.log", env=dict(os.environ)
        )
        world.processes["kubelet"].start()

        settings = dict(by_kind(control_docs, "ConfigMap")[0]["data"])
        deployments = {
            d["metadata"]["labels"]["app.kubernetes.io/component"]: d
            for d in by_kind(control_docs, "Deployment")
        }
        for name, (command, which) in COMMAND_LINES.items():
            # beat has no credentials of its own in the chart; it runs beside the informer's
            creds = credentials["worker" if command == "worker" else "informer"]
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith(("MCM_", "KUBERNETES_"))},
                **COMPRESSED,
                **container_env(deployments[command], settings),
                **creds.mount.environ(control_url),
                "MCM_REDIS_URL": redis_server.url,
                "MCM_WORKER_POOL": "threads",  # one process per worker: its log is its only one
                "POD_NAME": name,
                "PYTHONPATH": str(ROOT),
            }
            env.pop("MCM_CONTROL_KUBECONFIG", None)
            env.pop("MCM_TARGET_KUBECONFIG", None)
            world.ports[name] = free_port()
            argv = [sys.executable, "-m", "mcm_tasks.cli", command, *command_line(which, creds.kubeconfig),
                    f"--port={world.ports[name]}", "--address=127.0.0.1"]  # fmt: skip
            if command == "informer":
                argv.append(f"--identity={name}")
            proc = ManagedProcess(argv, workdir / "logs" / f"{name}.log", env=env)
            proc.start()
            world.processes[name] = proc
        yield world


def _stuck(world: GardenerWorld, fleet: Fleet, what: str) -> str:
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(fleet.view(what))
    decisions = [d for c in (world.control, world.target) for d in c.decisions()]
    refused = sorted(
        {(d["user"], d["verb"], d.get("resource", d["path"])) for d in decisions if not d["allowed"]}
    )
    return f"{console.export_text()}\nrefused: {refused}\n{world.logs()}"


def test_gardeners_command_lines_in_cluster_and_rotating_tokens(tmp_path: Path) -> None:
    with gardener_world(tmp_path) as world:
        fleet = Fleet(world.control.admin, world.target.admin, MACHINE_NS)
        pids = {name: p.pid for name, p in world.processes.items()}
        try:
            fleet.create_secret("gardener-secret")
            for name, itype in (("gardener-a", "local.small"), ("gardener-b", "local.large")):
                fleet.create("machineclasses", machine_class(name, itype, MACHINE_NS, "gardener-secret"))
            fleet.create(
                "machinedeployments", machine_deployment("shoot-worker", MACHINE_NS, 3, "gardener-a")
            )
            try:
                wait_until(fleet.running(3, "gardener-a"), 180, interval=0.5, what="3 machines")
                fleet.scale("shoot-worker", 5)
                wait_until(fleet.running(5, "gardener-a"), 180, interval=0.5, what="5 machines")
                fleet.set_class("shoot-worker", "gardener-b")
                wait_until(fleet.running(5, "gardener-b"), 240, interval=0.5, what="rolled to gardener-b")

                for component in world.credentials:  # new tokens everywhere, then the old ones die
                    world.issue(component)
                world.revoke_old()
                rotated = time.monotonic()
                fleet.scale("shoot-worker", 2)
                wait_until(
                    fleet.running(2, "gardener-b"), 60, interval=0.5, what="scaled to 2 after the rotation"
                )
                wait_until(lambda: len(fleet.nodes()) == 2, 60, interval=0.5, what="their nodes gone")
                assert time.monotonic() - rotated < 60

                fleet.scale("shoot-worker", 0)
                wait_until(
                    lambda: not fleet.machines() and not fleet.nodes(), 120, interval=0.5, what="scaled to 0"
                )
            except TimeoutError as err:
                pytest.fail(_stuck(world, fleet, str(err)))
        finally:
            fleet.close()

        assert {name: p.pid for name, p in world.processes.items()} == pids
        assert all(p.alive() for p in world.processes.values()), world.logs()
        configure({"redis_url": world.redis_url})
        try:
            with redis.Redis.from_url(world.redis_url, decode_responses=True) as client:
                failing = {kind: client.hgetall(queue_keys(kind).failing) for kind in QUEUES}
            assert sum(s.failing for s in read_stats()) == 0, f"a key left failing: {failing}"
        finally:
            reset_settings()

        refused_401 = sum(
            world.metric(name, "mcm_kube_credential_reloads_total", {"trigger": "unauthorized"})
            for name in ("informer-0", "worker-0", "worker-1")
        )
        assert refused_401 >= 1, "the revoked tokens met no 401: the rotation was not exercised"
        logged = 0
        for name in ("informer-0", "worker-0", "worker-1"):
            lines = UNAUTHORIZED_LINE.findall(world.log(name))
            # once per client that met the 401 (the informer has its leader-election client too)
            assert len(lines) <= (3 if name.startswith("informer") else 2) * 2, (name, lines)
            logged += len(lines)
        assert logged >= 1
        for name in ("informer-0", "worker-0", "worker-1", "beat-0"):
            text = world.log(name)
            assert "Traceback" not in text, (name, text[-3000:])
            assert "API server down" not in text, name  # the safety probe's client copies the credentials
            assert text.count("accepted and ignored") <= 1, name


def test_a_scale_waits_while_a_go_mcm_holds_its_lease(tmp_path: Path) -> None:
    """A Go MCM not yet gone: another holder keeps ``machine-controller-manager`` renewed; ours
    stand by (the marker names the holder) and a scale does nothing until that holder stops
    renewing, then completes."""
    from kubernetes import config

    with gardener_world(tmp_path) as world:
        fleet = Fleet(world.control.admin, world.target.admin, MACHINE_NS)
        admin = config.new_client_from_config(config_file=str(world.control.admin))
        client = redis.Redis.from_url(world.redis_url)
        configure({"redis_url": world.redis_url})
        try:
            fleet.create_secret("gardener-secret")
            fleet.create(
                "machineclasses", machine_class("gardener-a", "local.small", MACHINE_NS, "gardener-secret")
            )
            fleet.create(
                "machinedeployments", machine_deployment("shoot-worker", MACHINE_NS, 1, "gardener-a")
            )
            try:
                wait_until(fleet.running(1, "gardener-a"), 180, interval=0.5, what="1 machine")
                # the Go MCM writes itself into the Lease (ours has not expired: it takes it over)
                with Rival(admin, MACHINE_NS, "machine-controller-manager", duration=15, every=2.0):
                    wait_until(
                        lambda: standby.read(client) is not None, 30, interval=0.5, what="ours standing by"
                    )
                    held = standby.read(client)
                    assert held is not None and held.holder == "go-mcm"
                    fleet.scale("shoot-worker", 3)
                    time.sleep(8)  # standing by is what is under test: nothing may move meanwhile
                    assert len(fleet.machines()) == 1, "a machine was created while a Go MCM held the Lease"
                released = time.monotonic()
                wait_until(
                    fleet.running(3, "gardener-a"), 120, interval=0.5, what="scaled once the Lease was free"
                )
                assert time.monotonic() - released >= 10, "ours acted before the Go MCM's Lease expired"
                assert standby.read(client) is None
            except TimeoutError as err:
                pytest.fail(_stuck(world, fleet, str(err)))
        finally:
            reset_settings()
            client.close()
            admin.close()
            fleet.close()
