"""A moto server as a real HTTP EC2/STS/IAM endpoint, a small AWS world in it, and builders for
driver requests shared by the AWS unit and integration tests.

The server runs as a child process on a free port (not moto's in-process patching), so boto3
goes through its whole HTTP stack: signing, retries, pagination, our event hooks.
"""

from __future__ import annotations

import copy
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from mcm_sandbox.procs import ServerProcess, http_ok
from mcm_tasks.api import Machine, MachineClass
from providers.driver import Secret

REGION = "eu-west-1"
ZONE = "eu-west-1b"
CLUSTER_TAG = "kubernetes.io/cluster/shoot--dev--a"
ROLE_TAG = "kubernetes.io/role/node"
ACCESS_KEY_ID = "AKIAMOTOTESTKEY00001"
SECRET_ACCESS_KEY = "moto-very-secret-access-key-0123456789"
USER_DATA = b"#!/bin/bash\necho bootstrap-token-s3cr3t-value > /etc/token\n"
PLACEMENT_ANNOTATION = "machine.sapcloud.io/awsPlacement"


@dataclass
class MotoServer(ServerProcess):
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> MotoServer:
        def argv() -> list[str]:
            return [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)]

        self.launch(argv, "moto", lambda: http_ok(f"{self.url}/moto-api/"), timeout, "moto server", 0.1)
        return self

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=30):
            pass


@dataclass
class AwsWorld:
    """What a MachineClass refers to: a VPC with an IPv6 subnet, a security group, an instance
    profile, and two AMIs whose root devices differ."""

    url: str
    subnet_id: str
    security_group_id: str
    profile_name: str
    profile_arn: str
    ami_xvda: str
    ami_sda1: str

    def ec2(self) -> Any:
        return boto3.client(
            "ec2",
            region_name=REGION,
            endpoint_url=self.url,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
        )


#: moto's built-in AMIs are the same after every reset; finding them scans ~1300 images
_AMI_BY_ROOT: dict[str, str] = {}


def build_world(url: str) -> AwsWorld:
    kw: dict[str, Any] = {
        "region_name": REGION,
        "endpoint_url": url,
        "aws_access_key_id": ACCESS_KEY_ID,
        "aws_secret_access_key": SECRET_ACCESS_KEY,
    }
    ec2 = boto3.client("ec2", **kw)
    iam = boto3.client("iam", **kw)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16", AmazonProvidedIpv6CidrBlock=True)["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone=ZONE)["Subnet"][
        "SubnetId"
    ]
    group = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]
    profile = iam.create_instance_profile(InstanceProfileName="nodes")["InstanceProfile"]

    def ami(root: str) -> str:
        if root not in _AMI_BY_ROOT:
            images = ec2.describe_images(
                Owners=["amazon"], Filters=[{"Name": "root-device-name", "Values": [root]}]
            )["Images"]
            _AMI_BY_ROOT[root] = str(images[0]["ImageId"])
        return _AMI_BY_ROOT[root]

    return AwsWorld(
        url=url,
        subnet_id=subnet,
        security_group_id=group,
        profile_name=profile["InstanceProfileName"],
        profile_arn=profile["Arn"],
        ami_xvda=ami("/dev/xvda"),
        ami_sda1=ami("/dev/sda1"),
    )


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path_factory.mktemp("moto")).start()
    yield server
    server.stop()


@pytest.fixture()
def aws_world(moto_server: MotoServer) -> AwsWorld:
    """A fresh, empty cloud per test."""
    moto_server.reset()
    return build_world(moto_server.url)


# --- request builders -------------------------------------------------------------------------


def provider_spec(
    ami: str = "ami-00000001",
    subnet_id: str = "subnet-00000001",
    security_group_id: str = "sg-00000001",
    profile_name: str = "nodes",
) -> dict[str, Any]:
    """A providerSpec as Gardener's AWS extension writes it (camelCase, upstream field names)."""
    return {
        "apiVersion": "mcm.gardener.cloud/v1alpha1",
        "ami": ami,
        "region": REGION,
        "machineType": "m5.large",
        "iam": {"name": profile_name},
        "keyName": "",
        "blockDevices": [
            {"deviceName": "/root", "ebs": {"volumeSize": 50, "volumeType": "gp3", "encrypted": True}},
            {
                "deviceName": "/dev/sdf",
                "ebs": {"volumeSize": 100, "volumeType": "gp2", "deleteOnTermination": True},
            },
        ],
        "networkInterfaces": [{"subnetID": subnet_id, "securityGroupIDs": [security_group_id]}],
        "tags": {CLUSTER_TAG: "1", ROLE_TAG: "1", "worker.gardener.cloud/pool": "pool-a"},
    }


def world_spec(world: AwsWorld, **overrides: Any) -> dict[str, Any]:
    spec = provider_spec(world.ami_xvda, world.subnet_id, world.security_group_id, world.profile_name)
    spec.update(copy.deepcopy(overrides))
    return spec


def make_machine_class(spec: dict[str, Any], provider: str = "AWS", name: str = "aws-a") -> MachineClass:
    return MachineClass.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "provider": provider,
            "providerSpec": spec,
            "secretRef": {"name": "aws-secret", "namespace": "default"},
        }
    )


def make_machine(name: str, provider_id: str = "", placement: dict[str, Any] | str | None = None) -> Machine:
    annotations: dict[str, str] = {}
    if placement is not None:
        annotations[PLACEMENT_ANNOTATION] = placement if isinstance(placement, str) else json.dumps(placement)
    return Machine.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "class": {"kind": "MachineClass", "name": "aws-a"},
                "providerID": provider_id,
                "nodeTemplate": {"metadata": {"annotations": annotations}},
            },
        }
    )


def make_secret(**overrides: bytes | None) -> Secret:
    data: dict[str, bytes | None] = {
        "providerAccessKeyId": ACCESS_KEY_ID.encode(),
        "providerSecretAccessKey": SECRET_ACCESS_KEY.encode(),
        "userData": USER_DATA,
    }
    data.update(overrides)
    return Secret(data={k: v for k, v in data.items() if v is not None})
