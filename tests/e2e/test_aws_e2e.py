"""End to end on AWS: a MachineDeployment of 3 with an AWS MachineClass, in the full sandbox
(Redis, control and target API servers, informer, 2 workers, beat, kubelet simulator) pointed at a
moto server. It scales to 1 and is deleted; no instance may be left running in moto, no Machine or
Node in the clusters, and neither the credentials nor the userData in any process's log.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from kubernetes import client, config

from mcm_sandbox import runner
from mcm_sandbox.fleet import machine_deployment
from mcm_sandbox.procs import wait_until
from providers.aws.instances import LIVE_STATES
from tests.e2e.support import running_sandbox
from tests.integration.moto_fixture import (
    ACCESS_KEY_ID,
    CLUSTER_TAG,
    REGION,
    ROLE_TAG,
    SECRET_ACCESS_KEY,
    USER_DATA,
    AwsWorld,
    MotoServer,
    build_world,
    world_spec,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


GROUP, VERSION, NS = "machine.sapcloud.io", "v1alpha1", "default"
DEPLOYMENT, CLASS, SECRET = "aws-e2e", "aws-e2e", "aws-e2e-secret"
STEP_TIMEOUT = 150.0
#: a token only the userData carries: finding it in a log means the userData leaked
USER_DATA_MARK = "bootstrap-token-s3cr3t-value"

#: compressed time, set before ``up`` so every process of the sandbox inherits it
COMPRESSED_ENV = {
    "MCM_MEDIUM_RETRY": "3s",
    "MCM_LONG_RETRY": "10s",
    "MCM_MACHINE_CREATION_TIMEOUT": "2m",
    "MCM_MACHINE_HEALTH_TIMEOUT": "1m",
    "MCM_MACHINE_DRAIN_TIMEOUT": "30s",
    "MCM_POD_EVICTION_RETRY_INTERVAL": "1s",
    "MCM_MIN_RESYNC_PERIOD": "5m",
    "MCM_AWS_DESCRIBE_TIMEOUT": "20",
    "MCM_KUBELET_HEARTBEAT_INTERVAL": "5",
    "MCM_KUBELET_AWS_REGION_RESCAN": "2",
}


class Clusters:
    """The control cluster (machine objects, secrets), the target cluster (nodes) and moto."""

    def __init__(self, sandbox: runner.Sandbox, world: AwsWorld) -> None:
        self.control = config.new_client_from_config(config_file=str(sandbox.kubeconfig))
        self.target = config.new_client_from_config(config_file=str(sandbox.target_kubeconfig))
        # typed Any: the generated client's stubs want model objects where plain dicts work
        self.custom: Any = client.CustomObjectsApi(self.control)
        self.core: Any = client.CoreV1Api(self.control)
        self.nodes_api: Any = client.CoreV1Api(self.target)
        self.ec2: Any = boto3.client(
            "ec2",
            region_name=REGION,
            endpoint_url=world.url,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
        )

    def close(self) -> None:
        self.control.close()
        self.target.close()

    def items(self, plural: str) -> list[dict[str, Any]]:
        return list(self.custom.list_namespaced_custom_object(GROUP, VERSION, NS, plural)["items"])

    def nodes(self) -> dict[str, Any]:
        return {n.metadata.name: n for n in self.nodes_api.list_node().items}

    def instances(self, states: tuple[str, ...] = LIVE_STATES) -> list[dict[str, Any]]:
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-state-name", "Values": list(states)}]
        )
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def running_machines(self) -> list[dict[str, Any]]:
        return [
            m
            for m in self.items("machines")
            if (m.get("status") or {}).get("currentStatus", {}).get("phase") == "Running"
        ]

    def settled(self, replicas: int) -> bool:
        """``replicas`` Running machines and nothing else: as many Nodes and live instances."""
        machines = self.items("machines")
        return (
            len(machines) == replicas
            and len(self.running_machines()) == replicas
            and len(self.nodes()) == replicas
            and len(self.instances()) == replicas
        )

    def describe(self) -> str:
        """What the clusters and moto show, for a timeout's message."""
        machines = [
            (
                m["metadata"]["name"],
                (m.get("status") or {}).get("currentStatus", {}).get("phase"),
                (m.get("status") or {}).get("lastOperation", {}).get("description"),
            )
            for m in self.items("machines")
        ]
        instances = [(i["InstanceId"], i["State"]["Name"]) for i in self.instances()]
        return f"machines={machines} nodes={sorted(self.nodes())} instances={instances}"

    def wait(self, predicate: Any, what: str) -> None:
        try:
            wait_until(predicate, STEP_TIMEOUT, interval=0.5, what=what)
        except TimeoutError as err:
            raise TimeoutError(f"{err}: {self.describe()}") from None


def secret_manifest() -> dict[str, Any]:
    data = {
        "providerAccessKeyId": ACCESS_KEY_ID.encode(),
        "providerSecretAccessKey": SECRET_ACCESS_KEY.encode(),
        "userData": USER_DATA,
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NS},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def machine_class(world: AwsWorld) -> dict[str, Any]:
    """An AWS MachineClass as Gardener writes it: AMI, region, type, subnet and security group,
    cluster and role tags, block devices; credentials and userData in one secret."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MachineClass",
        "metadata": {"name": CLASS, "namespace": NS},
        "provider": "AWS",
        "providerSpec": world_spec(world),
        "secretRef": {"name": SECRET, "namespace": NS},
    }


@pytest.fixture()
def sandbox(tmp_path: Path, moto_server: MotoServer) -> Iterator[runner.Sandbox]:
    with running_sandbox(tmp_path / "sandbox", COMPRESSED_ENV, aws_endpoint=moto_server.url) as started:
        yield started


@pytest.fixture()
def world(moto_server: MotoServer) -> AwsWorld:
    moto_server.reset()
    return build_world(moto_server.url)


def assert_machines_match_nodes_and_instances(clusters: Clusters) -> None:
    """Every machine's node is named by its instance's private DNS name and carries its providerID."""
    nodes = clusters.nodes()
    by_id = {i["InstanceId"]: i for i in clusters.instances()}
    for machine in clusters.items("machines"):
        name = machine["metadata"]["name"]
        provider_id = machine["spec"]["providerID"]
        assert provider_id.startswith(f"aws:///{REGION}/i-"), provider_id
        instance = by_id[provider_id.rsplit("/", 1)[-1]]
        node_name = machine["metadata"]["labels"]["node"]
        assert node_name == instance["PrivateDnsName"] and node_name.endswith(".compute.internal")
        assert nodes[node_name].spec.provider_id == provider_id
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
        assert tags["Name"] == name and CLUSTER_TAG in tags and ROLE_TAG in tags


def test_machine_deployment_on_aws_scales_and_deletes(sandbox: runner.Sandbox, world: AwsWorld) -> None:
    clusters = Clusters(sandbox, world)
    try:
        clusters.core.create_namespaced_secret(NS, secret_manifest())
        clusters.custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, "machineclasses", machine_class(world)
        )
        clusters.custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, "machinedeployments", machine_deployment(DEPLOYMENT, NS, 3, CLASS)
        )
        clusters.wait(lambda: clusters.settled(3), "3 Running machines with Nodes")
        assert_machines_match_nodes_and_instances(clusters)

        clusters.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, "machinedeployments", DEPLOYMENT, {"spec": {"replicas": 1}}
        )
        clusters.wait(lambda: clusters.settled(1), "scaled to 1")
        assert_machines_match_nodes_and_instances(clusters)

        clusters.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "machinedeployments", DEPLOYMENT)

        def all_gone() -> bool:
            return not (
                clusters.items("machinedeployments")
                or clusters.items("machinesets")
                or clusters.items("machines")
                or clusters.nodes()
                or clusters.instances(("pending", "running"))
            )

        clusters.wait(all_gone, "deployment, sets, machines, nodes and instances gone")
        assert clusters.instances() == []  # not merely stopped either
        assert len(clusters.instances(("terminated",))) == 3  # every instance ever run was terminated
    finally:
        clusters.close()
    logs = [p for p in (sandbox.dir / "logs").rglob("*") if p.is_file()]
    assert logs
    for path in logs:
        text = path.read_text(errors="replace")
        for secret in (SECRET_ACCESS_KEY, USER_DATA_MARK, base64.b64encode(USER_DATA).decode()):
            assert secret not in text, f"a secret leaked into {path.name}"
