"""The kubelet simulator playing the kubelets of EC2 instances in a moto server (a real HTTP
endpoint on a free port), against the sandbox API server and a real Redis."""

from __future__ import annotations

import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_sandbox.kubelet.aws import AwsSettings, AwsSource
from mcm_sandbox.kubelet.simulator import KubeletSimulator
from mcm_sandbox.kubelet.sources import CombinedSource, LocalSource
from mcm_sandbox.procs import ApiServer, ManagedProcess, wait_until
from mcm_tasks.redisdb import get_redis
from providers.aws import AWSDriver
from providers.driver import CreateMachineRequest, Secret
from providers.local import LocalCloud, LocalDriver
from tests.integration.moto_fixture import (
    ACCESS_KEY_ID,
    REGION,
    SECRET_ACCESS_KEY,
    ZONE,
    AwsWorld,
    make_machine,
    make_machine_class,
    make_secret,
    world_spec,
)

pytestmark = pytest.mark.integration


WAIT = 20.0
OTHER_REGION = "us-west-2"


@pytest.fixture()
def core(api: ApiClient, aws_world: AwsWorld) -> Any:
    """No Nodes left from an earlier test: moto hands out the same private addresses (and so
    the same Node names) again after its reset."""
    v1 = client.CoreV1Api(api)
    nodes: list[Any] = v1.list_node().items
    for node in nodes:
        v1.delete_node(node.metadata.name)
    return v1


SimFactory = Callable[..., KubeletSimulator]


@pytest.fixture()
def start_kubelet(api: ApiClient, aws_world: AwsWorld, redis_url: str) -> Iterator[SimFactory]:
    """Runs a simulator on the moto endpoint in a thread; ``start_kubelet(regions=(...), ...)``."""
    running: list[tuple[threading.Event, threading.Thread]] = []

    def start(**settings: Any) -> KubeletSimulator:
        settings.setdefault("regions", (REGION,))
        source = AwsSource(AwsSettings(aws_world.url, **settings), get_redis(redis_url))
        sim = KubeletSimulator(api, source, heartbeat_interval=1.0, node_grace=2.0, detach_delay=0.5)
        stop = threading.Event()
        thread = threading.Thread(target=sim.run, args=(stop, 0.1), daemon=True)
        thread.start()
        running.append((stop, thread))
        return sim

    yield start
    for stop, thread in running:
        stop.set()
        thread.join(10)


def run_instance(world: AwsWorld, region: str = REGION, instance_type: str = "m5.large") -> dict[str, Any]:
    """One instance per reservation, so DescribeInstances pages hold few of them."""
    ec2: Any = boto3.client(
        "ec2",
        region_name=region,
        endpoint_url=world.url,
        aws_access_key_id=ACCESS_KEY_ID,
        aws_secret_access_key=SECRET_ACCESS_KEY,
    )
    params: dict[str, Any] = {"ImageId": world.ami_xvda, "MinCount": 1, "MaxCount": 1}
    if region == REGION:
        params["SubnetId"] = world.subnet_id
    else:  # moto's default VPC there; the world's AMI is one of moto's built-in ones
        params["ImageId"] = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance: dict[str, Any] = ec2.run_instances(InstanceType=instance_type, **params)["Instances"][0]
    return instance


def node_or_none(core: Any, name: str) -> Any:
    try:
        return core.read_node(name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def ready(core: Any, name: str) -> Any:
    node = node_or_none(core, name)
    conds = {c.type: c for c in (node.status.conditions or [])} if node else {}
    return conds.get("Ready")


def wait_ready(core: Any, name: str, status: str = "True", timeout: float = WAIT) -> Any:
    wait_until(
        lambda: (cond := ready(core, name)) is not None and cond.status == status,
        timeout,
        what=f"{name} Ready={status}",
    )
    return core.read_node(name)


def test_running_instances_register_nodes_named_by_private_dns(
    core: Any, aws_world: AwsWorld, start_kubelet: SimFactory
) -> None:
    instances = [run_instance(aws_world) for _ in range(5)]
    start_kubelet(page_size=2)  # 5 reservations, 3 pages: every page is read
    for inst in instances:
        node = wait_ready(core, inst["PrivateDnsName"])
        assert node.spec.provider_id == f"aws:///{REGION}/{inst['InstanceId']}"
        labels = node.metadata.labels
        assert labels["node.kubernetes.io/instance-type"] == "m5.large"
        assert labels["topology.kubernetes.io/zone"] == ZONE
        assert labels["topology.kubernetes.io/region"] == REGION
        assert labels["kubernetes.io/arch"] == "amd64"
        assert labels["kubernetes.io/hostname"] == inst["PrivateDnsName"]
        assert node.status.capacity == {"cpu": "2", "memory": "8192Mi", "pods": "110"}
        addresses = {a.type: a.address for a in node.status.addresses}
        assert addresses["InternalIP"] == inst["PrivateIpAddress"]
        assert node.status.node_info.system_uuid == inst["InstanceId"]


def test_node_identity_is_what_the_aws_driver_answers(
    core: Any, aws_world: AwsWorld, start_kubelet: SimFactory
) -> None:
    """The machine controller matches Node and Machine by these two values."""
    driver = AWSDriver(endpoint_url=aws_world.url, describe_timeout=10.0)
    request = CreateMachineRequest(
        machine=make_machine("m-a"),
        machine_class=make_machine_class(world_spec(aws_world)),
        secret=make_secret(),
    )
    created = driver.create_machine(request)
    start_kubelet()
    node = wait_ready(core, created.node_name)
    assert node.spec.provider_id == created.provider_id


def test_terminated_and_stopped_instances_stop_heartbeating(
    core: Any, aws_world: AwsWorld, start_kubelet: SimFactory
) -> None:
    keep, stop, terminate = (run_instance(aws_world) for _ in range(3))
    start_kubelet()
    for inst in (keep, stop, terminate):
        wait_ready(core, inst["PrivateDnsName"])
    ec2 = aws_world.ec2()
    ec2.terminate_instances(InstanceIds=[terminate["InstanceId"]])
    ec2.stop_instances(InstanceIds=[stop["InstanceId"]])
    for inst in (terminate, stop):
        cond = wait_ready(core, inst["PrivateDnsName"], "Unknown").status.conditions
        [unknown] = [c for c in cond if c.type == "Ready"]
        assert unknown.reason == "NodeStatusUnknown"
        assert unknown.last_heartbeat_time < unknown.last_transition_time
    alive = ready(core, keep["PrivateDnsName"])
    assert alive.status == "True"
    beat = alive.last_heartbeat_time
    wait_until(lambda: ready(core, keep["PrivateDnsName"]).last_heartbeat_time > beat, WAIT, what="heartbeat")


def test_regions_are_discovered_and_rescanned(
    core: Any, aws_world: AwsWorld, start_kubelet: SimFactory
) -> None:
    here = run_instance(aws_world)
    start_kubelet(regions=(), rescan=0.5)
    # no region named: every scan asks moto about each of its regions, which on a loaded host (CI's
    # four test processes) took longer than the module's 20 s once
    wait_ready(core, here["PrivateDnsName"], timeout=3 * WAIT)
    there = run_instance(aws_world, OTHER_REGION, "t3.micro")  # in a region nobody named
    node = wait_ready(core, there["PrivateDnsName"], timeout=3 * WAIT)
    assert node.spec.provider_id == f"aws:///{OTHER_REGION}/{there['InstanceId']}"
    assert node.metadata.labels["topology.kubernetes.io/region"] == OTHER_REGION
    assert node.status.capacity["cpu"] == "2" and node.status.capacity["memory"] == "1024Mi"
    beat = ready(core, there["PrivateDnsName"]).last_heartbeat_time
    wait_until(
        lambda: ready(core, there["PrivateDnsName"]).last_heartbeat_time > beat, WAIT, what="heartbeat there"
    )


def test_a_node_deleted_by_hand_is_not_registered_again(
    core: Any, aws_world: AwsWorld, start_kubelet: SimFactory
) -> None:
    gone, witness = run_instance(aws_world), run_instance(aws_world)
    sim = start_kubelet()
    wait_ready(core, gone["PrivateDnsName"])
    core.delete_node(gone["PrivateDnsName"])
    late = run_instance(aws_world)  # registered only by a tick that also saw the deletion
    wait_ready(core, late["PrivateDnsName"])
    sim.tick()
    start_kubelet().tick()  # a restarted simulator remembers too (the book is in Redis)
    assert node_or_none(core, gone["PrivateDnsName"]) is None
    assert ready(core, witness["PrivateDnsName"]).status == "True"


def test_pods_on_an_instance_node_run(core: Any, aws_world: AwsWorld, start_kubelet: SimFactory) -> None:
    inst = run_instance(aws_world)
    start_kubelet()
    name = inst["PrivateDnsName"]
    wait_ready(core, name)
    ns = f"kla-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": ns}})
    spec = {"nodeName": name, "containers": [{"name": "app", "image": "busybox"}]}
    core.create_namespaced_pod(ns, {"metadata": {"name": "p"}, "spec": spec})
    wait_until(lambda: core.read_namespaced_pod("p", ns).status.phase == "Running", WAIT, what="pod running")
    assert core.read_namespaced_pod("p", ns).status.host_ip == inst["PrivateIpAddress"]


def test_one_simulator_plays_local_vms_and_instances(
    core: Any, aws_world: AwsWorld, api: ApiClient, redis_url: str
) -> None:
    local = LocalDriver(redis_url).create_machine(
        CreateMachineRequest(
            machine=make_machine("local-a"),
            machine_class=make_machine_class({}, provider="local", name="lc"),
            secret=Secret(data={"userData": b"#!/bin/sh\n"}),
        )
    )
    inst = run_instance(aws_world)
    source = CombinedSource(
        [
            LocalSource(LocalCloud(get_redis(redis_url))),
            AwsSource(AwsSettings(aws_world.url, regions=(REGION,)), get_redis(redis_url)),
        ]
    )
    sim = KubeletSimulator(api, source, heartbeat_interval=1.0, node_grace=2.0)
    sim.tick()
    assert core.read_node("local-a").spec.provider_id == local.provider_id
    assert core.read_node(inst["PrivateDnsName"]).spec.provider_id.startswith("aws:///")
    aws_world.ec2().terminate_instances(InstanceIds=[inst["InstanceId"]])
    # node-lifecycle covers the nodes of every source: the instance's goes Unknown, not the VM's
    wait_until(
        lambda: sim.tick() is not None and ready(core, inst["PrivateDnsName"]).status == "Unknown",
        WAIT,
        interval=0.2,
        what="instance node Unknown",
    )
    assert ready(core, "local-a").status == "True"


def test_kubelet_command_with_aws_endpoint(
    core: Any, aws_world: AwsWorld, target: ApiServer, redis_url: str, tmp_path: Path
) -> None:
    inst = run_instance(aws_world)
    script = "import typer; from mcm_sandbox.cloud_cli import kubelet_command; typer.run(kubelet_command)"
    args = ["--target-kubeconfig", str(target.kubeconfig), "--redis-url", redis_url, "--interval", "0.2"]
    proc = ManagedProcess(
        [sys.executable, "-c", script, *args, "--aws-endpoint", aws_world.url, "--aws-region", REGION],
        tmp_path / "kubelet.log",
    )
    proc.start()
    try:
        node = wait_ready(core, inst["PrivateDnsName"])
    finally:
        proc.stop()
    assert proc.proc is not None and proc.proc.returncode == 0, proc.log_tail()
    assert node.spec.provider_id == f"aws:///{REGION}/{inst['InstanceId']}"
    assert ACCESS_KEY_ID not in proc.log_tail(200)


def test_kubelet_command_stops_in_time_while_the_cloud_hangs(
    target: ApiServer, redis_url: str, tmp_path: Path
) -> None:
    """A stop is served within the simulator's grace even while a round is blocked on an EC2
    endpoint that accepts and never answers (a loaded host's moto): exit 0, not a SIGKILL after
    the owner's patience runs out. Fails when the rounds run in the main thread (boto3's 15 s read
    timeout, then closing the clusters one after another)."""
    from mcm_sandbox.cloud_cli import STOP_GRACE

    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(16)  # connections complete in the kernel and are never read or answered
        endpoint = f"http://127.0.0.1:{hole.getsockname()[1]}"
        script = "import typer; from mcm_sandbox.cloud_cli import kubelet_command; typer.run(kubelet_command)"
        args = ["--target-kubeconfig", str(target.kubeconfig), "--redis-url", redis_url, "--interval", "0.2"]
        proc = ManagedProcess(
            [sys.executable, "-c", script, *args, "--aws-endpoint", endpoint, "--aws-region", REGION],
            tmp_path / "kubelet.log",
        )
        proc.start()
        try:
            wait_until(lambda: "kubelet simulator started" in proc.log_tail(), WAIT, what="simulator started")
            wait_until(lambda: len(established_to(hole)) > 0, WAIT, what="a request to the hung cloud")
            started = time.monotonic()
            proc.stop(timeout=STOP_GRACE + 4.0)
            took = time.monotonic() - started
        finally:
            proc.kill()
    assert proc.proc is not None and proc.proc.returncode == 0, (took, proc.log_tail())
    assert "kubelet simulator stopped" in proc.log_tail()


def established_to(server: socket.socket) -> list[str]:
    """Connections the kernel completed to ``server``'s port (from /proc/net/tcp): the simulator's
    request is in flight and unanswered."""
    port = f"{server.getsockname()[1]:04X}"
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return [line for line in lines if line.split()[1].endswith(f":{port}") and line.split()[3] == "01"]
