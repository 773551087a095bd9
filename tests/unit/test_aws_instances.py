"""The AWS driver's pure decisions: the RunInstances request, lookups, initialization state."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from providers.aws import instances
from providers.aws.instance_io import backoff_delays
from providers.aws.spec import AWSProviderSpec, decode_provider_spec
from tests.integration.moto_fixture import CLUSTER_TAG, ROLE_TAG, USER_DATA, provider_spec


def _spec(**overrides: Any) -> AWSProviderSpec:
    raw = copy.deepcopy(provider_spec())
    raw.update(overrides)
    return decode_provider_spec(raw)


def _request(
    spec: AWSProviderSpec, annotations: dict[str, str] | None = None, root: str = "/dev/xvda"
) -> Any:
    return instances.run_instances_input(spec, "machine-1", annotations or {}, root, USER_DATA)


def test_base_request() -> None:
    req = _request(_spec())
    assert req["ImageId"] == "ami-00000001" and req["InstanceType"] == "m5.large"
    assert (req["MinCount"], req["MaxCount"]) == (1, 1)
    assert req["UserData"] == USER_DATA  # boto3 base64-encodes it; encoding here would double it
    assert req["IamInstanceProfile"] == {"Name": "nodes"}
    for absent in ("KeyName", "Placement", "InstanceMarketOptions", "CpuOptions", "MetadataOptions"):
        assert absent not in req
    assert req["NetworkInterfaces"] == [
        {
            "DeviceIndex": 0,
            "SubnetId": "subnet-00000001",
            "Groups": ["sg-00000001"],
            "DeleteOnTermination": True,
        }
    ]


def test_tags_go_on_instance_volumes_and_enis_with_the_machine_name() -> None:
    req = _request(_spec(tags={CLUSTER_TAG: "1", ROLE_TAG: "1", "Name": "spoofed", "team": "x"}))
    kinds = [t["ResourceType"] for t in req["TagSpecifications"]]
    assert kinds == ["instance", "volume", "network-interface"]
    for spec in req["TagSpecifications"]:
        tags = {t["Key"]: t["Value"] for t in spec["Tags"]}
        assert tags == {CLUSTER_TAG: "1", ROLE_TAG: "1", "team": "x", "Name": "machine-1"}


@pytest.mark.parametrize("root", ["/dev/xvda", "/dev/sda1"])
def test_root_device_takes_the_ami_root_device_name(root: str) -> None:
    mappings = _request(_spec(), root=root)["BlockDeviceMappings"]
    assert [m["DeviceName"] for m in mappings] == [root, "/dev/sdf"]
    assert mappings[0]["Ebs"] == {
        "DeleteOnTermination": True,
        "Encrypted": True,
        "VolumeSize": 50,
        "VolumeType": "gp3",
    }
    assert mappings[1]["Ebs"]["Encrypted"] is False  # default


def test_a_single_device_is_the_root_whatever_its_name() -> None:
    spec = _spec(blockDevices=[{"deviceName": "/dev/sdz", "ebs": {"volumeSize": 8, "volumeType": "gp2"}}])
    assert _request(spec, root="/dev/sda1")["BlockDeviceMappings"][0]["DeviceName"] == "/dev/sda1"


def test_ebs_options_are_passed_only_when_set() -> None:
    ebs = {
        "volumeSize": 20,
        "volumeType": "io1",
        "iops": 4000,
        "throughput": 300,
        "snapshotID": "snap-1",
        "kmsKeyID": "key-1",
        "deleteOnTermination": False,
    }
    mapping = _request(_spec(blockDevices=[{"deviceName": "/root", "ebs": ebs}]))["BlockDeviceMappings"][0]
    assert mapping["Ebs"] == {
        "DeleteOnTermination": False,
        "Encrypted": False,
        "VolumeSize": 20,
        "VolumeType": "io1",
        "Iops": 4000,
        "Throughput": 300,
        "SnapshotId": "snap-1",
        "KmsKeyId": "key-1",
    }


def test_no_block_devices_is_a_spec_error() -> None:
    with pytest.raises(instances.SpecError):
        _request(_spec(blockDevices=[]))


def test_network_interface_options() -> None:
    nics = [
        {
            "subnetID": "s-1",
            "securityGroupIDs": ["sg-1"],
            "ipv6AddressCount": 1,
            "associatePublicIPAddress": True,
        },
        {
            "subnetID": "s-2",
            "securityGroupIDs": ["sg-2"],
            "deleteOnTermination": False,
            "description": "efa",
            "interfaceType": "efa-only",
            "networkCardIndex": 1,
            "deviceIndex": 0,
            "ipv6AddressCount": 2,
            "primaryIpv6": False,
        },
    ]
    out = _request(_spec(networkInterfaces=nics))["NetworkInterfaces"]
    assert out[0] == {
        "DeviceIndex": 0,
        "SubnetId": "s-1",
        "Groups": ["sg-1"],
        "DeleteOnTermination": True,
        "AssociatePublicIpAddress": True,
        "Ipv6AddressCount": 1,
        "PrimaryIpv6": True,
    }
    assert out[1] == {
        "DeviceIndex": 0,
        "SubnetId": "s-2",
        "Groups": ["sg-2"],
        "DeleteOnTermination": False,
        "Description": "efa",
        "Ipv6AddressCount": 2,
        "PrimaryIpv6": False,
        "InterfaceType": "efa-only",
        "NetworkCardIndex": 1,
    }


def test_iam_by_name_else_arn_key_name_ebs_optimized_and_monitoring() -> None:
    req = _request(_spec(iam={"arn": "arn:p"}, keyName="ssh", ebsOptimized=True, monitoring=True))
    assert req["IamInstanceProfile"] == {"Arn": "arn:p"}
    assert (req["KeyName"], req["EbsOptimized"], req["Monitoring"]) == ("ssh", True, {"Enabled": True})


def test_metadata_and_cpu_options() -> None:
    req = _request(
        _spec(
            instanceMetadataOptions={
                "httpTokens": "required",
                "httpPutResponseHopLimit": 2,
                "httpProtocolIpv6": "enabled",
            },
            cpuOptions={"coreCount": 4, "threadsPerCore": 1, "amdSevSnp": "enabled"},
        )
    )
    assert req["MetadataOptions"] == {
        "HttpTokens": "required",
        "HttpPutResponseHopLimit": 2,
        "HttpProtocolIpv6": "enabled",
    }
    assert req["CpuOptions"] == {"CoreCount": 4, "ThreadsPerCore": 1, "AmdSevSnp": "enabled"}
    assert _request(_spec(cpuOptions={"amdSevSnp": "disabled"}))["CpuOptions"] == {"AmdSevSnp": "disabled"}


@pytest.mark.parametrize(
    ("reservation", "expected"),
    [
        ({"capacityReservationPreference": "open"}, {"CapacityReservationPreference": "open"}),
        ({"capacityReservationId": "cr-1"}, {"CapacityReservationTarget": {"CapacityReservationId": "cr-1"}}),
        (
            {"capacityReservationResourceGroupArn": "arn:g"},
            {"CapacityReservationTarget": {"CapacityReservationResourceGroupArn": "arn:g"}},
        ),
    ],
)
def test_capacity_reservation(reservation: dict[str, str], expected: dict[str, Any]) -> None:
    assert _request(_spec(capacityReservation=reservation))["CapacityReservationSpecification"] == expected


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"spotPrice": ""}, {"MarketType": "spot", "SpotOptions": {"SpotInstanceType": "one-time"}}),
        (
            {"spotPrice": "0.5"},
            {"MarketType": "spot", "SpotOptions": {"SpotInstanceType": "one-time", "MaxPrice": "0.5"}},
        ),
        (
            {"instanceMarketOptions": {"marketType": "spot"}},
            {"MarketType": "spot", "SpotOptions": {"SpotInstanceType": "one-time"}},
        ),
        (
            {"instanceMarketOptions": {"marketType": "capacity-block"}, "spotPrice": "1"},
            {"MarketType": "capacity-block"},
        ),
        (
            {"capacityReservation": {"capacityReservationId": "cr-1", "isMLCapacityBlock": True}},
            {"MarketType": "capacity-block"},
        ),
    ],
)
def test_market_options(overrides: dict[str, Any], expected: dict[str, Any]) -> None:
    assert _request(_spec(**overrides))["InstanceMarketOptions"] == expected


def test_placement_from_spec_wins_over_the_annotation() -> None:
    annotations = {instances.PLACEMENT_ANNOTATION: json.dumps({"AvailabilityZone": "eu-west-1a"})}
    spec = _spec(
        placement={
            "tenancy": "host",
            "hostId": "h-1",
            "partitionNumber": 2,
            "groupId": "pg",
            "affinity": "host",
        }
    )
    assert _request(spec, annotations)["Placement"] == {
        "GroupId": "pg",
        "Tenancy": "host",
        "HostId": "h-1",
        "PartitionNumber": 2,
        "Affinity": "host",
    }


def test_placement_falls_back_to_the_annotation_with_go_style_keys() -> None:
    raw = json.dumps(
        {"availabilityZone": "eu-west-1a", "TENANCY": "dedicated", "GroupName": "", "Unknown": 1}
    )
    req = _request(_spec(placement={}), {instances.PLACEMENT_ANNOTATION: raw})
    assert req["Placement"] == {"AvailabilityZone": "eu-west-1a", "Tenancy": "dedicated"}
    assert "Placement" not in _request(_spec(), {instances.PLACEMENT_ANNOTATION: "{}"})


@pytest.mark.parametrize("raw", ["{bad", "[1]"])
def test_a_broken_placement_annotation_is_a_value_error(raw: str) -> None:
    with pytest.raises(ValueError, match="awsPlacement") as err:
        _request(_spec(), {instances.PLACEMENT_ANNOTATION: raw})
    assert not isinstance(err.value, instances.SpecError)


def test_provider_ids() -> None:
    assert instances.encode_provider_id("eu-west-1", "i-1") == "aws:///eu-west-1/i-1"
    assert instances.decode_provider_id("aws:///eu-west-1/i-1") == ("eu-west-1", "i-1")
    assert instances.decode_provider_id("aws:///eu-west-1a/i-2") == ("eu-west-1a", "i-2")
    for bad in ("i-1", "", "aws:///eu-west-1/"):
        with pytest.raises(ValueError):
            instances.decode_provider_id(bad)


def test_lookup_filters() -> None:
    spec = _spec()
    live = {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}
    assert instances.class_filters(spec) == [
        {"Name": "tag-key", "Values": [CLUSTER_TAG]},
        {"Name": "tag-key", "Values": [ROLE_TAG]},
        live,
    ]
    assert instances.machine_filters(spec, "m-1")[0] == {"Name": "tag:Name", "Values": ["m-1"]}
    assert instances.machine_filters(spec, "m-1")[1:] == instances.class_filters(spec)


def _eni(eni_id: str, device: int, check: bool = True, prefixes: int = 0, card: int = 0) -> dict[str, Any]:
    return {
        "NetworkInterfaceId": eni_id,
        "SourceDestCheck": check,
        "Ipv6Prefixes": [{"Ipv6Prefix": f"2a05::{i}/80"} for i in range(prefixes)],
        "Attachment": {"DeviceIndex": device, "NetworkCardIndex": card},
    }


def test_initialization_state() -> None:
    nics = [
        {"subnetID": "s", "securityGroupIDs": ["g"], "ipv6PrefixCount": 2},
        {
            "subnetID": "s",
            "securityGroupIDs": ["g"],
            "networkCardIndex": 1,
            "deviceIndex": 0,
            "ipv6PrefixCount": 1,
        },
    ]
    spec = _spec(networkInterfaces=nics, srcAndDstChecksEnabled=False)
    fresh = {"InstanceId": "i-1", "NetworkInterfaces": [_eni("eni-a", 0), _eni("eni-b", 0, card=1)]}
    assert instances.ipv6_prefix_deficits(spec, fresh) == [("eni-a", 2), ("eni-b", 1)]
    assert instances.enis_with_source_dest_check(fresh) == ["eni-a", "eni-b"]
    assert len(instances.initialization_problems(spec, fresh)) == 3
    half = {
        "NetworkInterfaces": [
            _eni("eni-a", 0, check=False, prefixes=1),
            _eni("eni-b", 0, check=False, card=1, prefixes=3),
        ]
    }
    assert instances.ipv6_prefix_deficits(spec, half) == [("eni-a", 1)]
    done = {
        "NetworkInterfaces": [
            _eni("eni-a", 0, check=False, prefixes=2),
            _eni("eni-b", 0, check=False, card=1, prefixes=1),
        ]
    }
    assert instances.initialization_problems(spec, done) == []
    # without srcAndDstChecksEnabled=false an enabled check is what the spec wants
    assert (
        instances.initialization_problems(
            _spec(networkInterfaces=nics), {**done, "NetworkInterfaces": [_eni("eni-a", 0, prefixes=2)]}
        )
        == []
    )


def test_source_dest_check_falls_back_to_the_instance_attribute_without_enis() -> None:
    spec = _spec(srcAndDstChecksEnabled=False)
    assert instances.initialization_problems(spec, {"SourceDestCheck": True})
    assert not instances.initialization_problems(spec, {"SourceDestCheck": False})


def test_instance_details() -> None:
    inst = {
        "InstanceId": "i-1",
        "State": {"Name": "running"},
        "Tags": [{"Key": "a", "Value": "b"}, {"Key": "Name", "Value": "m-1"}],
        "PrivateIpAddress": "10.0.0.1",
        "PublicIpAddress": "1.2.3.4",
        "PrivateDnsName": "ip-10-0-0-1.ec2.internal",
    }
    assert instances.name_tag(inst) == "m-1" and instances.name_tag({}) == ""
    spec = _spec()
    ours = {"Tags": [{"Key": CLUSTER_TAG, "Value": ""}, {"Key": ROLE_TAG, "Value": ""}]}
    assert instances.belongs_to_class(spec, ours)
    assert not instances.belongs_to_class(spec, {"Tags": [{"Key": ROLE_TAG, "Value": "1"}]})
    assert not instances.belongs_to_class(spec, inst)
    assert instances.is_live(inst) and not instances.is_live({"State": {"Name": "terminated"}})
    assert [(a.type, a.address) for a in instances.node_addresses(inst)] == [
        ("InternalIP", "10.0.0.1"),
        ("ExternalIP", "1.2.3.4"),
        ("InternalDNS", "ip-10-0-0-1.ec2.internal"),
        ("Hostname", "ip-10-0-0-1.ec2.internal"),
    ]


def test_backoff_sleeps_add_up_to_the_timeout_and_grow() -> None:
    assert list(backoff_delays(0)) == []
    assert list(backoff_delays(0.3)) == [0.3]
    assert list(backoff_delays(4.0)) == [0.5, 1.0, 2.0, 0.5]
    long = list(backoff_delays(300.0))
    assert sum(long) == pytest.approx(300.0) and max(long) == 30.0 and len(long) < 20
