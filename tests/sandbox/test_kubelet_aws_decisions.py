"""The kubelet simulator's EC2 side, pure parts: instances as VMs, capacity, which regions a tick
reads, and one kubelet over several VM sources."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from mcm_sandbox.kubelet import node as kn
from mcm_sandbox.kubelet.aws import (
    AwsVM,
    instance_type_capacity,
    instance_vm,
    is_aws_node,
    regions_to_scan,
)
from mcm_sandbox.kubelet.sources import CombinedSource

LAUNCHED = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def instance(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "InstanceId": "i-0abc",
        "State": {"Name": "running"},
        "PrivateDnsName": "ip-10-0-1-4.eu-west-1.compute.internal",
        "PrivateIpAddress": "10.0.1.4",
        "Placement": {"AvailabilityZone": "eu-west-1b"},
        "InstanceType": "m5.large",
        "Architecture": "x86_64",
        "LaunchTime": LAUNCHED,
    }
    return {**base, **over}


def test_a_running_instance_is_a_joining_vm_named_by_private_dns() -> None:
    vm = instance_vm(instance(), "eu-west-1", {"cpu": "2"}, None)
    assert vm is not None and vm.joins(0)
    assert vm.node_name == "ip-10-0-1-4.eu-west-1.compute.internal"
    assert vm.provider_id == "aws:///eu-west-1/i-0abc"
    assert (vm.zone, vm.region, vm.instance_type, vm.architecture) == (
        "eu-west-1b",
        "eu-west-1",
        "m5.large",
        "amd64",
    )
    assert vm.internal_ip == "10.0.1.4" and vm.capacity == {"cpu": "2"}
    assert vm.launched == LAUNCHED.timestamp() and vm.registered_at is None


@pytest.mark.parametrize(
    ("state", "listed", "joins"),
    [
        ("pending", True, False),
        ("running", True, True),
        ("stopping", True, False),
        ("stopped", True, False),
        ("shutting-down", False, False),
        ("terminated", False, False),
    ],
)
def test_instance_states(state: str, listed: bool, joins: bool) -> None:
    vm = instance_vm(instance(State={"Name": state}), "eu-west-1", {}, None)
    assert (vm is not None) is listed
    assert (vm is not None and vm.joins(0)) is joins


def test_an_instance_without_private_dns_name_has_no_node() -> None:
    assert instance_vm(instance(PrivateDnsName=""), "eu-west-1", {}, None) is None


@pytest.mark.parametrize(("ec2", "k8s"), [("x86_64", "amd64"), ("arm64", "arm64"), ("i386", "386")])
def test_architectures(ec2: str, k8s: str) -> None:
    vm = instance_vm(instance(Architecture=ec2), "r", {}, 5.0)
    assert vm is not None and vm.architecture == k8s and vm.registered_at == 5.0


def test_capacity_from_the_instance_type() -> None:
    info = {"VCpuInfo": {"DefaultVCpus": 4}, "MemoryInfo": {"SizeInMiB": 16384}}
    assert instance_type_capacity(info) == {"pods": "110", "cpu": "4", "memory": "16384Mi"}
    assert instance_type_capacity({}) == {"pods": "110"}


def test_an_instance_vm_makes_the_same_node_as_a_local_one() -> None:
    vm = instance_vm(instance(), "eu-west-1", {"cpu": "2"}, None)
    assert vm is not None
    node = kn.node_manifest(vm, 1_700_000_000.0)
    assert node["metadata"]["name"] == vm.node_name and node["spec"]["providerID"] == vm.provider_id
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "m5.large"
    assert kn.node_ip(node) == "10.0.1.4"
    assert is_aws_node(node) and not kn.is_local_node(node)
    assert not is_aws_node({"spec": {"providerID": "local:///z/i-1"}}) and not is_aws_node({})


@pytest.mark.parametrize(
    ("configured", "last_full", "now", "expected"),
    [
        (("eu-west-1",), None, 0.0, (["eu-west-1"], True)),
        (("eu-west-1", "eu-west-1"), 9.0, 10.0, (["eu-west-1"], True)),  # configured: always all
        ((), None, 0.0, (["a", "b", "c"], True)),  # first tick: everything
        ((), 0.0, 5.0, (["b"], False)),  # between full scans: active only
        ((), 0.0, 10.0, (["a", "b", "c"], True)),  # rescan due
    ],
)
def test_regions_to_scan(
    configured: tuple[str, ...], last_full: float | None, now: float, expected: tuple[list[str], bool]
) -> None:
    assert regions_to_scan(configured, ["c", "a", "b"], {"b"}, last_full, now, 10.0) == expected


class Listed:
    """A VM source over a fixed list, recording what it was told."""

    def __init__(self, vms: list[AwsVM], prefix: str, now: float = 7.0) -> None:
        self.vms, self.prefix, self.now = vms, prefix, now
        self.marked: list[str] = []

    def clock(self) -> float:
        return self.now

    def live_vms(self) -> Sequence[kn.KubeletVM]:
        return self.vms

    def owns(self, node: dict[str, Any]) -> bool:
        return str(node.get("spec", {}).get("providerID", "")).startswith(self.prefix)

    def mark_registered(self, vm_id: str, when: float) -> None:
        self.marked.append(vm_id)


def _vm(instance_id: str) -> AwsVM:
    vm = instance_vm(instance(InstanceId=instance_id), "r", {}, None)
    assert vm is not None
    return vm


def test_combined_source_routes_registrations_to_the_vms_source() -> None:
    first, second = Listed([_vm("i-1")], "a://", now=3.0), Listed([_vm("i-2")], "b://")
    both = CombinedSource([first, second])
    assert [vm.id for vm in both.live_vms()] == ["i-1", "i-2"] and both.clock() == 3.0
    both.mark_registered("i-2", 1.0)
    both.mark_registered("i-unknown", 1.0)
    assert first.marked == [] and second.marked == ["i-2"]
    assert both.owns({"spec": {"providerID": "b://x"}}) and not both.owns({"spec": {"providerID": "c://"}})
    with pytest.raises(ValueError):
        CombinedSource([])
