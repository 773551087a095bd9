"""One kubelet-simulator process for the Nodes of several virtual clusters
(``mcm_sandbox/kubelet/clusters.py``): each VM's Node lands in the cluster of its Machine's
namespace, clusters come and go with a clusters folder, and one cluster's API server failing leaves
the others served. Against one sandbox API-server process with virtual clusters and a real Redis."""

from __future__ import annotations

import contextlib
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from mcm_sandbox.kubelet.clusters import DEFAULT, MultiClusterKubelet, cluster_for, clusters_in, namespace_of
from mcm_sandbox.kubelet.sources import LocalSource
from mcm_sandbox.procs import ApiServer, ManagedProcess, wait_until
from mcm_tasks.api import Machine, MachineClass
from mcm_tasks.redisdb import get_redis
from providers.driver import CreateMachineRequest, Secret
from providers.local import LocalCloud, LocalDriver

pytestmark = pytest.mark.integration

WAIT = 15.0
SECRET = Secret(data={"userData": b"#!/bin/sh\n"})


# --- the routing rules ---------------------------------------------------------------------------


def test_a_vm_goes_to_its_namespaces_cluster_else_the_default_else_nowhere() -> None:
    both = {"shoot-a": 1, DEFAULT: 2}
    assert cluster_for("shoot-a", both) == "shoot-a"
    assert cluster_for("shoot-x", both) == DEFAULT
    assert cluster_for("", both) == DEFAULT
    assert cluster_for("shoot-x", {"shoot-a": 1}) is None
    assert namespace_of(SimpleNamespace(namespace="shoot-a")) == "shoot-a"  # type: ignore[arg-type]
    assert namespace_of(SimpleNamespace()) == ""  # type: ignore[arg-type]  # an EC2 instance


def test_a_clusters_folder_is_its_kubeconfig_files(tmp_path: Path) -> None:
    assert clusters_in(tmp_path / "missing") == {}
    (tmp_path / "a.kubeconfig").write_text("x")
    (tmp_path / ".b.kubeconfig").write_text("x")  # hidden: a file being written
    (tmp_path / "c.kubeconfig.tmp").write_text("x")
    (tmp_path / "notes.txt").write_text("x")
    assert clusters_in(tmp_path) == {"a": tmp_path / "a.kubeconfig"}


# --- against the sandbox -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    server = ApiServer(
        tmp_path_factory.mktemp("kubelet-clusters"),
        name="targets",
        extra_args=["--virtual-cluster", "shoot-a", "--virtual-cluster", "shoot-b"],
    ).start()
    yield server
    server.stop()


def launch(driver: LocalDriver, namespace: str, name: str) -> str:
    machine_class = MachineClass.model_validate(
        {
            "metadata": {"name": "kl", "namespace": namespace},
            "provider": "local",
            "providerSpec": {},
            "nodeTemplate": {
                "capacity": {"cpu": "2", "memory": "4Gi"},
                "instanceType": "local.small",
                "region": "sandbox-1",
                "zone": "sandbox-1a",
            },
        }
    )
    machine = Machine.model_validate({"metadata": {"name": name, "namespace": namespace}})
    req = CreateMachineRequest(machine=machine, machine_class=machine_class, secret=SECRET)
    return driver.create_machine(req).provider_id


def node_names(api: client.ApiClient) -> set[str]:
    return {n.metadata.name for n in client.CoreV1Api(api).list_node().items}


def ready(api: client.ApiClient, name: str) -> bool:
    try:
        node = client.CoreV1Api(api).read_node(name)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture()
def clients(host: ApiServer) -> Iterator[dict[str, client.ApiClient]]:
    apis = {
        name: config.new_client_from_config(config_file=str(host.cluster_kubeconfig(name)))
        for name in ("shoot-a", "shoot-b")
    }
    apis["root"] = config.new_client_from_config(config_file=str(host.kubeconfig))
    yield apis
    for api in apis.values():
        api.close()


@pytest.fixture()
def kubelets(redis_url: str) -> Iterator[MultiClusterKubelet]:
    multi = MultiClusterKubelet(
        LocalSource(LocalCloud(get_redis(redis_url))),
        lambda path: config.new_client_from_config(config_file=str(path)),
        watch=True,
        sim_options={"heartbeat_interval": 1.0, "node_grace": 3.0},
    )
    yield multi
    multi.close()


@contextlib.contextmanager
def running(kubelets: MultiClusterKubelet, folder: Path | None = None) -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(target=kubelets.run, args=(stop, 0.1, folder, 0.2), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


def test_each_vms_node_registers_in_its_namespaces_cluster(
    host: ApiServer, redis_url: str, kubelets: MultiClusterKubelet, clients: dict[str, client.ApiClient]
) -> None:
    driver = LocalDriver(redis_url)
    kubelets.add("shoot-a", host.cluster_kubeconfig("shoot-a"))
    kubelets.add("shoot-b", host.cluster_kubeconfig("shoot-b"))
    kubelets.add(DEFAULT, host.kubeconfig)
    in_a, in_b, elsewhere = unique("a"), unique("b"), unique("o")
    launch(driver, "shoot-a", in_a)
    launch(driver, "shoot-b", in_b)
    launch(driver, "shoot-z", elsewhere)  # no cluster of its own: the default one
    with running(kubelets):
        wait_until(lambda: ready(clients["shoot-a"], in_a), WAIT, what="shoot-a's node ready in shoot-a")
        wait_until(lambda: ready(clients["shoot-b"], in_b), WAIT, what="shoot-b's node ready in shoot-b")
        wait_until(lambda: ready(clients["root"], elsewhere), WAIT, what="the other node in the default")
    assert in_b not in node_names(clients["shoot-a"]) and elsewhere not in node_names(clients["shoot-a"])
    assert in_a not in node_names(clients["shoot-b"]) and elsewhere not in node_names(clients["shoot-b"])
    assert not {in_a, in_b} & node_names(clients["root"])


def fault(host: ApiServer, cluster: str, method: str, rule: dict[str, Any] | None = None) -> None:
    """Add (POST) or clear (DELETE) fault rules of one virtual cluster."""
    import json
    import urllib.request

    import yaml

    token = yaml.safe_load(host.cluster_kubeconfig(cluster).read_text())["users"][0]["user"]["token"]
    data = json.dumps(rule).encode() if rule is not None else None
    req = urllib.request.Request(f"{host.url}/clusters/{cluster}/sandbox/faults", data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    urllib.request.urlopen(req, timeout=10).close()


def test_one_clusters_api_server_hanging_leaves_the_others_served(
    host: ApiServer, redis_url: str, kubelets: MultiClusterKubelet, clients: dict[str, client.ApiClient]
) -> None:
    driver = LocalDriver(redis_url)
    kubelets.add("shoot-a", host.cluster_kubeconfig("shoot-a"))
    kubelets.add("shoot-b", host.cluster_kubeconfig("shoot-b"))
    in_a, in_b = unique("a"), unique("b")
    with running(kubelets):
        wait_until(lambda: all(c.watched is None or c.watched.synced() for c in kubelets.clusters.values()),
                   WAIT, what="both clusters' watches listed")  # fmt: skip
        fault(host, "shoot-a", "POST", {"action": "hang", "verbs": ["create"], "resources": ["nodes"]})
        try:
            launch(driver, "shoot-a", in_a)
            launch(driver, "shoot-b", in_b)
            wait_until(
                lambda: ready(clients["shoot-b"], in_b), WAIT, what="shoot-b's node while shoot-a hangs"
            )
            assert in_a not in node_names(clients["shoot-a"])
        finally:
            fault(host, "shoot-a", "DELETE")
        wait_until(lambda: ready(clients["shoot-a"], in_a), WAIT, what="shoot-a's node once it answers")


def test_clusters_added_and_removed_in_the_folder_are_followed(
    host: ApiServer, redis_url: str, kubelets: MultiClusterKubelet
) -> None:
    driver = LocalDriver(redis_url)
    name = unique("late")
    with running(kubelets, host.clusters_dir):
        wait_until(
            lambda: {"shoot-a", "shoot-b"} <= set(kubelets.clusters), WAIT, what="the folder's clusters"
        )
        path = host.add_cluster(name)
        node = unique("n")
        launch(driver, name, node)
        api = config.new_client_from_config(config_file=str(path))
        try:
            wait_until(lambda: ready(api, node), WAIT, what="a node in the cluster added at run time")
        finally:
            api.close()
        host.remove_cluster(name)
        wait_until(lambda: name not in kubelets.clusters, WAIT, what="the removed cluster stopped")
    assert "shoot-a" in kubelets.clusters


def test_the_kubelet_command_serves_a_clusters_folder(
    host: ApiServer, redis_url: str, clients: dict[str, client.ApiClient], tmp_path: Path
) -> None:
    driver = LocalDriver(redis_url)
    in_a, in_b = unique("a"), unique("b")
    launch(driver, "shoot-a", in_a)
    launch(driver, "shoot-b", in_b)
    script = "import typer; from mcm_sandbox.cloud_cli import kubelet_command; typer.run(kubelet_command)"
    args: list[Any] = [sys.executable, "-c", script, "--clusters-dir", str(host.clusters_dir)]
    proc = ManagedProcess([*args, "--redis-url", redis_url, "--interval", "0.1"], tmp_path / "kubelet.log")
    proc.start()
    try:
        wait_until(lambda: ready(clients["shoot-a"], in_a), WAIT, what="shoot-a's node ready")
        wait_until(lambda: ready(clients["shoot-b"], in_b), WAIT, what="shoot-b's node ready")
    finally:
        proc.stop()
    assert proc.proc is not None and proc.proc.returncode == 0, proc.log_tail()
    assert in_b not in node_names(clients["shoot-a"])


def test_a_tick_on_vms_read_before_its_last_tick_registers_no_node_again(
    host: ApiServer, redis_url: str, clients: dict[str, client.ApiClient]
) -> None:
    """The VMs are read once per round for all clusters while each cluster ticks in its own thread:
    a tick on a read older than its last tick would not see that tick's registrations and would
    register the Node again, after MCM deleted it with its VM (seen: a scale-down whose Nodes came
    back). Such a tick waits for a fresh read."""
    multi = MultiClusterKubelet(
        LocalSource(LocalCloud(get_redis(redis_url))),
        lambda path: config.new_client_from_config(config_file=str(path)),
        watch=False,
    )
    try:
        cluster = multi.add("shoot-a", host.cluster_kubeconfig("shoot-a"))
        name = unique("once")
        launch(LocalDriver(redis_url), "shoot-a", name)
        multi.tick()  # a fresh read, then a tick: the Node registers
        assert name in node_names(clients["shoot-a"])
        client.CoreV1Api(clients["shoot-a"]).delete_node(name)  # as MCM's deletion flow does
        assert cluster.tick() is None  # the VMs in hand were read before that tick: no tick on them
        assert name not in node_names(clients["shoot-a"])
        multi.tick()  # a read after it knows the Node was registered once
        assert name not in node_names(clients["shoot-a"])
    finally:
        multi.close()
