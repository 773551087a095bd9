"""The AWS providerSpec: decoding like Go's encoding/json, and every validation rule."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from providers.aws.secret import credentials_from, validate_secret
from providers.aws.spec import AWSProviderSpec, decode_provider_spec
from providers.aws.validation import check_provider_spec_and_secret, validate_provider_spec
from providers.errors import Code, MachineError
from tests.integration.moto_fixture import make_secret, provider_spec

#: a MachineClass providerSpec using every field upstream knows
FULL_UPSTREAM_SPEC: dict[str, Any] = {
    "apiVersion": "mcm.gardener.cloud/v1alpha1",
    "ami": "ami-123",
    "region": "eu-west-1",
    "machineType": "m5.large",
    "iam": {"arn": "arn:aws:iam::111122223333:instance-profile/nodes"},
    "keyName": "ssh-key",
    "ebsOptimized": True,
    "monitoring": True,
    "blockDevices": [
        {
            "deviceName": "/root",
            "noDevice": "",
            "virtualName": "",
            "ebs": {
                "deleteOnTermination": False,
                "encrypted": True,
                "iops": 3000,
                "throughput": 250,
                "kmsKeyID": "arn:aws:kms:eu-west-1:111122223333:key/abc",
                "snapshotID": "snap-1",
                "volumeSize": 50,
                "volumeType": "gp3",
            },
        }
    ],
    "capacityReservation": {"capacityReservationId": "cr-1", "isMLCapacityBlock": False},
    "networkInterfaces": [
        {
            "associatePublicIPAddress": False,
            "ipv6AddressCount": 1,
            "ipv6PrefixCount": 1,
            "deleteOnTermination": True,
            "description": "primary",
            "securityGroupIDs": ["sg-1"],
            "subnetID": "subnet-1",
            "interfaceType": "efa",
            "networkCardIndex": 0,
            "deviceIndex": 0,
            "primaryIpv6": True,
        }
    ],
    "spotPrice": "0.12",
    "srcAndDstChecksEnabled": False,
    "tags": {"kubernetes.io/cluster/c": "1", "kubernetes.io/role/node": "1"},
    "instanceMetadataOptions": {
        "httpEndpoint": "enabled",
        "httpPutResponseHopLimit": 2,
        "httpTokens": "required",
        "httpProtocolIpv6": "disabled",
    },
    "cpuOptions": {"coreCount": 2, "threadsPerCore": 1, "amdSevSnp": "enabled"},
    "placement": {
        "groupId": "pg-1",
        "tenancy": "host",
        "hostId": "h-1",
        "partitionNumber": 2,
        "affinity": "host",
    },
    "instanceMarketOptions": {"marketType": "spot"},
}


def test_every_upstream_field_decodes_and_validates() -> None:
    spec = decode_provider_spec(FULL_UPSTREAM_SPEC)
    assert validate_provider_spec(spec) == []
    assert spec.block_devices and spec.block_devices[0].ebs_or_empty.kms_key_id.endswith("key/abc")  # type: ignore[union-attr]
    assert spec.network_interfaces and spec.network_interfaces[0].ipv6_prefix_count == 1
    assert spec.placement and spec.placement.partition_number == 2
    assert spec.cpu_options and spec.cpu_options.amd_sev_snp == "enabled"
    assert spec.source_dest_check_disabled


def test_keys_match_case_insensitively_unknown_keys_are_ignored_and_null_means_unset() -> None:
    spec = decode_provider_spec(
        {
            "AMI": "ami-1",
            "Region": "r",
            "machinetype": "t3",
            "futureField": {"x": 1},
            "tags": None,
            "iam": None,
        }
    )
    assert (spec.ami, spec.region, spec.machine_type, spec.tags, spec.iam) == ("ami-1", "r", "t3", None, None)


def test_an_exact_key_wins_over_a_case_folded_one() -> None:
    assert decode_provider_spec({"AMI": "folded", "ami": "exact"}).ami == "exact"
    assert decode_provider_spec({"ami": "exact", "AMI": "folded"}).ami == "exact"


@pytest.mark.parametrize("raw", [json.dumps({"ami": "ami-1"}), json.dumps({"ami": "ami-1"}).encode()])
def test_json_text_and_bytes_decode(raw: str | bytes) -> None:
    assert decode_provider_spec(raw).ami == "ami-1"


@pytest.mark.parametrize(
    "raw",
    [
        "{not json",
        b"\xff\xfe",
        "[1, 2]",
        {"blockDevices": "not-a-list"},
        {"tags": {"a": 1}},
        {"blockDevices": [{"ebs": {"volumeSize": 2**31}}]},
        {"networkInterfaces": [{"securityGroupIDs": "sg-1"}]},
        {"cpuOptions": {"coreCount": "many"}},
    ],
)
def test_undecodable_spec_is_internal(raw: Any) -> None:
    with pytest.raises(MachineError) as err:
        decode_provider_spec(raw)
    assert err.value.code is Code.Internal


def _spec(mutate: Any) -> AWSProviderSpec:
    raw = copy.deepcopy(provider_spec())
    mutate(raw)
    return decode_provider_spec(raw)


def _set(path: str, value: Any) -> Any:
    """A mutation setting ``a.b.0.c`` (list indexes as numbers); None deletes the key."""

    def apply(raw: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = raw
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        key: Any = int(last) if last.isdigit() else last
        if value is None:
            del node[key]
        else:
            node[key] = value

    return apply


VALIDATION_MATRIX = [
    ("ami", _set("ami", ""), "ami: AMI is required"),
    ("region", _set("region", None), "region: region is required"),
    ("machineType", _set("machineType", ""), "machineType: machineType is required"),
    ("iam none", _set("iam", {}), "exactly one of IAM name or ARN"),
    ("iam both", _set("iam", {"name": "n", "arn": "a"}), "exactly one of IAM name or ARN"),
    (
        "cluster tag",
        _set("tags", {"kubernetes.io/role/node": "1"}),
        "kubernetes.io/cluster/<name> is required",
    ),
    ("role tag", _set("tags", {"kubernetes.io/cluster/c": "1"}), "kubernetes.io/role/<role> is required"),
    ("data device name", _set("blockDevices.1.deviceName", "/dev/nvme1"), "blockDevices[1].deviceName"),
    ("two roots", _set("blockDevices.1.deviceName", "/root"), "exactly one device must be named /root"),
    ("no root", _set("blockDevices.0.deviceName", "/dev/sdg"), "exactly one device must be named /root"),
    (
        "duplicate names",
        _set(
            "blockDevices",
            [
                {"deviceName": n, "ebs": {"volumeSize": 1, "volumeType": "gp2"}}
                for n in ("/root", "/dev/sdf", "/dev/sdf")
            ],
        ),
        "'/dev/sdf' is used 2 times",
    ),
    ("volume type", _set("blockDevices.0.ebs.volumeType", "gp9"), "blockDevices[0].ebs.volumeType"),
    ("volume type unset", _set("blockDevices.0.ebs.volumeType", None), "blockDevices[0].ebs.volumeType"),
    ("volume size", _set("blockDevices.0.ebs.volumeSize", 0), "blockDevices[0].ebs.volumeSize"),
    ("negative iops", _set("blockDevices.0.ebs.iops", -1), "blockDevices[0].ebs.iops"),
    ("io1 needs iops", _set("blockDevices.0.ebs.volumeType", "io1"), "blockDevices[0].ebs.iops"),
    ("throughput", _set("blockDevices.0.ebs.throughput", 0), "blockDevices[0].ebs.throughput"),
    (
        "reservation preference and id",
        _set(
            "capacityReservation", {"capacityReservationPreference": "open", "capacityReservationId": "cr-1"}
        ),
        "capacityReservationPreference cannot be set together",
    ),
    (
        "reservation preference and arn",
        _set(
            "capacityReservation",
            {"capacityReservationPreference": "none", "capacityReservationResourceGroupArn": "a"},
        ),
        "capacityReservationPreference cannot be set together",
    ),
    (
        "reservation id and arn",
        _set(
            "capacityReservation",
            {"capacityReservationId": "cr-1", "capacityReservationResourceGroupArn": "a"},
        ),
        "not both",
    ),
    ("no nics", _set("networkInterfaces", []), "at least one network interface is required"),
    ("subnet", _set("networkInterfaces.0.subnetID", ""), "networkInterfaces[0].subnetID"),
    ("no groups", _set("networkInterfaces.0.securityGroupIDs", []), "at least one security group"),
    (
        "blank group",
        _set("networkInterfaces.0.securityGroupIDs", ["sg-1", "  "]),
        "securityGroupIDs[1]: must not be blank",
    ),
    ("interface type", _set("networkInterfaces.0.interfaceType", "trunk"), "interfaceType"),
    (
        "card index",
        _set("networkInterfaces.0.networkCardIndex", -1),
        "networkCardIndex: must not be negative",
    ),
    ("device index", _set("networkInterfaces.0.deviceIndex", -1), "deviceIndex: must not be negative"),
    (
        "hop limit",
        _set("instanceMetadataOptions", {"httpPutResponseHopLimit": 65}),
        "httpPutResponseHopLimit",
    ),
    (
        "hop limit low",
        _set("instanceMetadataOptions", {"httpPutResponseHopLimit": -1}),
        "httpPutResponseHopLimit",
    ),
    ("http endpoint", _set("instanceMetadataOptions", {"httpEndpoint": "on"}), "httpEndpoint"),
    ("http tokens", _set("instanceMetadataOptions", {"httpTokens": "always"}), "httpTokens"),
    ("http ipv6", _set("instanceMetadataOptions", {"httpProtocolIpv6": "yes"}), "httpProtocolIpv6"),
    (
        "cores alone",
        _set("cpuOptions", {"coreCount": 2}),
        "coreCount and threadsPerCore must be set together",
    ),
    (
        "threads alone",
        _set("cpuOptions", {"threadsPerCore": 1}),
        "coreCount and threadsPerCore must be set together",
    ),
    (
        "threads value",
        _set("cpuOptions", {"coreCount": 2, "threadsPerCore": 3}),
        "threadsPerCore: must be 1 or 2",
    ),
    ("tenancy", _set("placement", {"tenancy": "shared"}), "placement.tenancy"),
    ("affinity", _set("placement", {"affinity": "any"}), "placement.affinity"),
    (
        "host id",
        _set("placement", {"hostId": "h-1", "tenancy": "dedicated"}),
        "hostId: requires tenancy 'host'",
    ),
    ("partition", _set("placement", {"partitionNumber": 0}), "partitionNumber: must be at least 1"),
]


@pytest.mark.parametrize(
    ("case", "mutate", "expected"), VALIDATION_MATRIX, ids=[c[0] for c in VALIDATION_MATRIX]
)
def test_validation_rule(case: str, mutate: Any, expected: str) -> None:
    problems = validate_provider_spec(_spec(mutate))
    assert any(expected in p for p in problems), problems


def test_the_base_spec_is_valid_and_so_are_edge_values() -> None:
    assert validate_provider_spec(_spec(lambda raw: None)) == []
    ok = [
        _set("blockDevices", [{"deviceName": "anything", "ebs": {"volumeSize": 1, "volumeType": "gp2"}}]),
        _set("blockDevices", []),
        _set("blockDevices.1.deviceName", "/dev/xvdba"),
        _set("blockDevices.0.ebs.iops", 0),
        _set("instanceMetadataOptions", {"httpPutResponseHopLimit": 0}),
        _set("instanceMetadataOptions", {"httpPutResponseHopLimit": 64}),
        _set("cpuOptions", {"amdSevSnp": "enabled"}),
        _set("placement", {"tenancy": "host", "hostId": "h-1", "partitionNumber": 1, "affinity": "default"}),
        _set("networkInterfaces.0.interfaceType", ""),
        _set("capacityReservation", {"capacityReservationPreference": "open"}),
        _set("iam", {"arn": "arn:aws:iam::1:instance-profile/x"}),
    ]
    for mutate in ok:
        assert validate_provider_spec(_spec(mutate)) == []


def test_all_problems_are_reported_in_one_invalid_argument() -> None:
    def many(raw: dict[str, Any]) -> None:
        raw["ami"] = ""
        raw["tags"] = {}
        raw["networkInterfaces"] = []

    with pytest.raises(MachineError) as err:
        check_provider_spec_and_secret(_spec(many), make_secret(userData=None))
    assert err.value.code is Code.InvalidArgument
    for part in ("ami", "cluster", "role", "network interface", "userData"):
        assert part in err.value.message


SECRET_MATRIX = [
    ("static keys", {}, []),
    (
        "alternative spelling",
        {
            "providerAccessKeyId": None,
            "providerSecretAccessKey": None,
            "accessKeyID": b"k",
            "secretAccessKey": b"s",
        },
        [],
    ),
    ("no access key", {"providerAccessKeyId": None}, ["providerAccessKeyId or accessKeyID"]),
    ("blank secret key", {"providerSecretAccessKey": b""}, ["providerSecretAccessKey or secretAccessKey"]),
    ("no user data", {"userData": None}, ["userData is required"]),
    (
        "web identity",
        {
            "providerAccessKeyId": None,
            "providerSecretAccessKey": None,
            "workloadIdentityTokenFile": b"/t",
            "roleARN": b"arn:aws:iam::1:role/r",
        },
        [],
    ),
    ("web identity no role", {"workloadIdentityTokenFile": b"/t"}, ["roleARN"]),
    (
        "web identity blank file",
        {"workloadIdentityTokenFile": b"", "roleARN": b"arn"},
        ["workloadIdentityTokenFile"],
    ),
    (
        "web identity no user data",
        {"workloadIdentityTokenFile": b"/t", "roleARN": b"a", "userData": None},
        ["userData"],
    ),
]


@pytest.mark.parametrize(("case", "overrides", "expected"), SECRET_MATRIX, ids=[c[0] for c in SECRET_MATRIX])
def test_secret_rule(case: str, overrides: dict[str, bytes | None], expected: list[str]) -> None:
    problems = validate_secret(make_secret(**overrides))
    assert len(problems) == len(expected), problems
    for fragment, problem in zip(expected, problems, strict=True):
        assert fragment in problem


def test_credentials_take_the_first_present_key_trimmed_and_never_show_in_repr() -> None:
    creds = credentials_from(make_secret(providerAccessKeyId=b" AKIA1 \n", accessKeyID=b"AKIA2"))
    assert creds.access_key_id == "AKIA1" and not creds.web_identity
    web = credentials_from(
        make_secret(workloadIdentityTokenFile=b"/var/run/token", roleARN=b"arn:aws:iam::1:role/r")
    )
    assert web.web_identity and web.role_arn.endswith("role/r")
    for shown in (repr(creds), str(creds), repr(web)):
        assert "AKIA1" not in shown and "secret" not in shown.lower() and "/var/run" not in shown
