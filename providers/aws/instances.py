"""Pure decisions of the AWS driver: the RunInstances request, the lookup filters, and what an
instance still lacks after creation. No I/O here, so every rule is table-testable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from providers.aws.spec import ROOT_DEVICE, AWSProviderSpec, BlockDeviceSpec, NetworkInterfaceSpec
from providers.driver import NodeAddress

#: the placement annotation on a machine's node template, used when the spec has no placement
PLACEMENT_ANNOTATION = "machine.sapcloud.io/awsPlacement"
#: states of an instance that still exists for MCM (upstream's lookup filter)
LIVE_STATES = ("pending", "running", "stopping", "stopped")
TAGGED_RESOURCES = ("instance", "volume", "network-interface")
NAME_TAG = "Name"
_EC2_PLACEMENT_KEYS = (
    "AvailabilityZone",
    "AvailabilityZoneId",
    "Affinity",
    "GroupName",
    "GroupId",
    "PartitionNumber",
    "HostId",
    "HostResourceGroupArn",
    "SpreadDomain",
    "Tenancy",
)

Instance = Mapping[str, Any]


class SpecError(ValueError):
    """The spec cannot be turned into a request (the driver's code depends on what failed)."""


# --- providerID -------------------------------------------------------------------------------


def encode_provider_id(region: str, instance_id: str) -> str:
    return f"aws:///{region}/{instance_id}"


def decode_provider_id(provider_id: str) -> tuple[str, str]:
    """(region, instance ID); the last two path segments, as upstream reads them."""
    parts = provider_id.split("/")
    if len(parts) < 2 or not parts[-1]:
        raise ValueError(f"cannot decode providerID {provider_id!r}")
    return parts[-2], parts[-1]


# --- RunInstances -----------------------------------------------------------------------------


def tag_specifications(tags: Mapping[str, str], machine_name: str) -> list[dict[str, Any]]:
    """The spec's tags plus ``Name=<machine>`` on instance, volumes and ENIs; ``Name`` from the
    spec is dropped because the Name tag is how the driver finds a machine's VM."""
    pairs = [{"Key": k, "Value": v} for k, v in sorted(tags.items()) if k != NAME_TAG]
    pairs.append({"Key": NAME_TAG, "Value": machine_name})
    return [{"ResourceType": kind, "Tags": [dict(p) for p in pairs]} for kind in TAGGED_RESOURCES]


def _ebs(disk: BlockDeviceSpec) -> dict[str, Any]:
    spec = disk.ebs_or_empty
    ebs: dict[str, Any] = {
        "DeleteOnTermination": True if spec.delete_on_termination is None else spec.delete_on_termination,
        "Encrypted": bool(spec.encrypted),
        "VolumeSize": spec.volume_size or 0,
        "VolumeType": spec.volume_type or "",
    }
    if spec.iops and spec.iops > 0:
        ebs["Iops"] = spec.iops
    if spec.throughput is not None:
        ebs["Throughput"] = spec.throughput
    if spec.snapshot_id is not None:
        ebs["SnapshotId"] = spec.snapshot_id
    if spec.kms_key_id:
        ebs["KmsKeyId"] = spec.kms_key_id
    return ebs


def block_device_mappings(devices: list[BlockDeviceSpec], root_device_name: str) -> list[dict[str, Any]]:
    """``/root`` (or a lone device, whatever its name) becomes the AMI's root device."""
    if not devices:
        raise SpecError("providerSpec.blockDevices: at least one block device is required")
    if not root_device_name:
        raise SpecError("the AMI has no root device name")
    return [
        {
            "DeviceName": root_device_name
            if disk.device_name == ROOT_DEVICE or len(devices) == 1
            else disk.device_name,
            "Ebs": _ebs(disk),
        }
        for disk in devices
    ]


def _device_index(nic: NetworkInterfaceSpec, position: int) -> int:
    return nic.device_index if nic.device_index is not None else position


def network_interfaces(nics: list[NetworkInterfaceSpec]) -> list[dict[str, Any]]:
    out = []
    for i, nic in enumerate(nics):
        item: dict[str, Any] = {
            "DeviceIndex": _device_index(nic, i),
            "SubnetId": nic.subnet_id or "",
            "Groups": list(nic.security_group_ids or []),
            "DeleteOnTermination": True if nic.delete_on_termination is None else nic.delete_on_termination,
        }
        if nic.associate_public_ip_address is not None:
            item["AssociatePublicIpAddress"] = nic.associate_public_ip_address
        if nic.description is not None:
            item["Description"] = nic.description
        if nic.ipv6_address_count is not None:
            item["Ipv6AddressCount"] = nic.ipv6_address_count
            item["PrimaryIpv6"] = True if nic.primary_ipv6 is None else nic.primary_ipv6
        if nic.interface_type:
            item["InterfaceType"] = nic.interface_type
        if nic.network_card_index is not None:
            item["NetworkCardIndex"] = nic.network_card_index
        out.append(item)
    return out


def _compact(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def iam_instance_profile(spec: AWSProviderSpec) -> dict[str, str]:
    if spec.iam and spec.iam.name:
        return {"Name": spec.iam.name}
    return {"Arn": spec.iam.arn} if spec.iam and spec.iam.arn else {}


def metadata_options(spec: AWSProviderSpec) -> dict[str, Any] | None:
    md = spec.instance_metadata_options
    if md is None:
        return None
    return _compact(
        {
            "HttpEndpoint": md.http_endpoint or None,
            "HttpPutResponseHopLimit": md.http_put_response_hop_limit,
            "HttpTokens": md.http_tokens or None,
            "HttpProtocolIpv6": md.http_protocol_ipv6 or None,
        }
    )


def cpu_options(spec: AWSProviderSpec) -> dict[str, Any] | None:
    cpu = spec.cpu_options
    if cpu is None:
        return None
    out: dict[str, Any] = {}
    if cpu.amd_sev_snp:
        out["AmdSevSnp"] = cpu.amd_sev_snp
    if cpu.core_count is not None and cpu.threads_per_core is not None:
        out["CoreCount"] = cpu.core_count
        out["ThreadsPerCore"] = cpu.threads_per_core
    return out


def capacity_reservation(spec: AWSProviderSpec) -> dict[str, Any] | None:
    """A preference, or a target by ID or resource-group ARN (validation allows only one)."""
    cr = spec.capacity_reservation
    if cr is None:
        return None
    if cr.preference:
        return {"CapacityReservationPreference": cr.preference}
    target = _compact(
        {"CapacityReservationId": cr.id, "CapacityReservationResourceGroupArn": cr.resource_group_arn}
    )
    return {"CapacityReservationTarget": target} if target else None


def placement(spec: AWSProviderSpec, node_template_annotations: Mapping[str, str]) -> dict[str, Any] | None:
    """From the spec, else from the node template's ``awsPlacement`` annotation (EC2 Placement
    JSON, keys matched case-insensitively as Go does); bad annotation JSON → ``ValueError``."""
    if spec.placement is not None:
        p = spec.placement
        from_spec = _compact(
            {
                "GroupId": p.group_id,
                "Tenancy": p.tenancy,
                "HostId": p.host_id,
                "PartitionNumber": p.partition_number,
                "Affinity": p.affinity,
            }
        )
        if from_spec:
            return from_spec
    raw = node_template_annotations.get(PLACEMENT_ANNOTATION, "")
    if not raw:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError as err:
        raise ValueError(f"annotation {PLACEMENT_ANNOTATION} is not valid JSON: {err}") from None
    if not isinstance(parsed, Mapping):
        raise ValueError(f"annotation {PLACEMENT_ANNOTATION} must be a JSON object")
    by_fold = {k.casefold(): k for k in _EC2_PLACEMENT_KEYS}
    out = {
        by_fold[k.casefold()]: v for k, v in parsed.items() if k.casefold() in by_fold and v not in (None, "")
    }
    return out or None


def market_options(spec: AWSProviderSpec) -> dict[str, Any] | None:
    """``instanceMarketOptions.marketType`` wins; an ML capacity block comes next; the deprecated
    ``spotPrice`` (``""`` = no maximum) last. Spot is always one-time: MCM replaces, never resumes."""
    market = spec.instance_market_options.market_type if spec.instance_market_options else None
    if not market and spec.capacity_reservation and spec.capacity_reservation.is_ml_capacity_block:
        market = "capacity-block"
    if not market and spec.spot_price is not None:
        market = "spot"
    if not market:
        return None
    out: dict[str, Any] = {"MarketType": market}
    if market == "spot":
        out["SpotOptions"] = {"SpotInstanceType": "one-time"}
        if spec.spot_price:
            out["SpotOptions"]["MaxPrice"] = spec.spot_price
    return out


def run_instances_input(
    spec: AWSProviderSpec,
    machine_name: str,
    node_template_annotations: Mapping[str, str],
    root_device_name: str,
    user_data: bytes,
) -> dict[str, Any]:
    """The whole RunInstances request. boto3 base64-encodes ``UserData`` itself."""
    request: dict[str, Any] = {
        "ImageId": spec.ami,
        "InstanceType": spec.machine_type,
        "MinCount": 1,
        "MaxCount": 1,
        "UserData": user_data,
        "BlockDeviceMappings": block_device_mappings(spec.block_devices or [], root_device_name),
        "NetworkInterfaces": network_interfaces(spec.network_interfaces or []),
        "IamInstanceProfile": iam_instance_profile(spec),
        "TagSpecifications": tag_specifications(spec.tag_map, machine_name),
    }
    optional = {
        "KeyName": spec.key_name or None,
        "MetadataOptions": metadata_options(spec),
        "CpuOptions": cpu_options(spec),
        "CapacityReservationSpecification": capacity_reservation(spec),
        "Placement": placement(spec, node_template_annotations),
        "InstanceMarketOptions": market_options(spec),
        "EbsOptimized": True if spec.ebs_optimized else None,
        "Monitoring": {"Enabled": True} if spec.monitoring else None,
    }
    request.update(_compact(optional))
    return request


# --- lookups ----------------------------------------------------------------------------------


def _live_filter() -> dict[str, Any]:
    return {"Name": "instance-state-name", "Values": list(LIVE_STATES)}


def class_filters(spec: AWSProviderSpec) -> list[dict[str, Any]]:
    """Every live VM of the class's cluster and role (ListMachines, orphan collection)."""
    return [
        {"Name": "tag-key", "Values": [spec.cluster_tag_key]},
        {"Name": "tag-key", "Values": [spec.role_tag_key]},
        _live_filter(),
    ]


def machine_filters(spec: AWSProviderSpec, machine_name: str) -> list[dict[str, Any]]:
    return [{"Name": f"tag:{NAME_TAG}", "Values": [machine_name]}, *class_filters(spec)]


def belongs_to_class(spec: AWSProviderSpec, instance: Instance) -> bool:
    keys = {tag.get("Key") for tag in instance.get("Tags") or []}
    return spec.cluster_tag_key in keys and spec.role_tag_key in keys


def is_live(instance: Instance) -> bool:
    return instance.get("State", {}).get("Name") in LIVE_STATES


def name_tag(instance: Instance) -> str:
    for tag in instance.get("Tags") or []:
        if tag.get("Key") == NAME_TAG:
            return str(tag.get("Value", ""))
    return ""


def node_addresses(instance: Instance) -> list[NodeAddress]:
    out = []
    if instance.get("PrivateIpAddress"):
        out.append(NodeAddress(type="InternalIP", address=instance["PrivateIpAddress"]))
    if instance.get("PublicIpAddress"):
        out.append(NodeAddress(type="ExternalIP", address=instance["PublicIpAddress"]))
    if instance.get("PrivateDnsName"):
        out.append(NodeAddress(type="InternalDNS", address=instance["PrivateDnsName"]))
        out.append(NodeAddress(type="Hostname", address=instance["PrivateDnsName"]))
    return out


# --- initialization ---------------------------------------------------------------------------


def _spec_nic_for(spec: AWSProviderSpec, attachment: Mapping[str, Any]) -> NetworkInterfaceSpec | None:
    """The spec entry an attached ENI was created from, by (network card, device index)."""
    card = attachment.get("NetworkCardIndex") or 0
    index = attachment.get("DeviceIndex")
    for position, nic in enumerate(spec.network_interfaces or []):
        if (nic.network_card_index or 0) == card and _device_index(nic, position) == index:
            return nic
    return None


def ipv6_prefix_deficits(spec: AWSProviderSpec, instance: Instance) -> list[tuple[str, int]]:
    """(ENI ID, prefixes still to assign) for every ENI with fewer prefixes than its spec asks."""
    out = []
    for eni in instance.get("NetworkInterfaces") or []:
        attachment = eni.get("Attachment")
        nic = _spec_nic_for(spec, attachment) if attachment else None
        if nic is None or nic.ipv6_prefix_count is None:
            continue
        missing = nic.ipv6_prefix_count - len(eni.get("Ipv6Prefixes") or [])
        if missing > 0:
            out.append((str(eni.get("NetworkInterfaceId", "")), missing))
    return out


def enis_with_source_dest_check(instance: Instance) -> list[str]:
    return [
        str(eni["NetworkInterfaceId"])
        for eni in instance.get("NetworkInterfaces") or []
        if eni.get("SourceDestCheck", True) and eni.get("NetworkInterfaceId")
    ]


def source_dest_check_on(instance: Instance) -> bool:
    """Per ENI when EC2 lists them (an instance-level attribute only covers the primary ENI)."""
    if instance.get("NetworkInterfaces"):
        return bool(enis_with_source_dest_check(instance))
    return bool(instance.get("SourceDestCheck", True))


def initialization_problems(spec: AWSProviderSpec, instance: Instance) -> list[str]:
    """What InitializeMachine would still have to do; GetMachineStatus reports it Uninitialized."""
    problems = []
    if spec.source_dest_check_disabled and source_dest_check_on(instance):
        problems.append("SourceDestCheck is enabled although providerSpec.srcAndDstChecksEnabled is false")
    for eni_id, missing in ipv6_prefix_deficits(spec, instance):
        problems.append(f"network interface {eni_id} lacks {missing} IPv6 prefix(es) of providerSpec")
    return problems
