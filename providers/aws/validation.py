"""The providerSpec rules of the AWS provider, as pure functions returning every problem found.

A user fixing a MachineClass should see all problems at once, so each rule appends to a list and
the driver raises one ``InvalidArgument`` naming them all. Messages name fields and allowed values,
never a secret.
"""

from __future__ import annotations

import re
from collections import Counter

from providers.aws.secret import validate_secret
from providers.aws.spec import (
    CLUSTER_TAG_PREFIX,
    ROLE_TAG_PREFIX,
    ROOT_DEVICE,
    AWSProviderSpec,
    BlockDeviceSpec,
    CapacityReservationSpec,
    CPUOptionsSpec,
    MetadataOptionsSpec,
    NetworkInterfaceSpec,
    PlacementSpec,
)
from providers.driver import Secret
from providers.errors import Code, MachineError

VOLUME_TYPES = ("gp2", "gp3", "io1", "st1", "sc1", "standard")
DATA_DEVICE_NAME = re.compile(r"^/dev/(sd[a-z]|xvd[a-c][a-z]?)$")
INTERFACE_TYPES = ("", "interface", "efa", "efa-only")
ENABLED_DISABLED = ("enabled", "disabled")
HTTP_TOKENS = ("required", "optional")
TENANCIES = ("default", "dedicated", "host")
AFFINITIES = ("default", "host")
MAX_HOP_LIMIT = 64


def validate_provider_spec(spec: AWSProviderSpec) -> list[str]:
    problems: list[str] = []
    if not spec.ami:
        problems.append("providerSpec.ami: AMI is required")
    if not spec.region:
        problems.append("providerSpec.region: region is required")
    if not spec.machine_type:
        problems.append("providerSpec.machineType: machineType is required")
    iam_name = spec.iam.name if spec.iam else None
    iam_arn = spec.iam.arn if spec.iam else None
    if bool(iam_name) == bool(iam_arn):
        problems.append("providerSpec.iam: exactly one of IAM name or ARN must be set")
    problems += _tags(spec.tag_map)
    problems += _block_devices(spec.block_devices or [])
    problems += _capacity_reservation(spec.capacity_reservation)
    problems += _network_interfaces(spec.network_interfaces or [])
    problems += _metadata_options(spec.instance_metadata_options)
    problems += _cpu_options(spec.cpu_options)
    problems += _placement(spec.placement)
    return problems


def check_provider_spec_and_secret(spec: AWSProviderSpec, secret: Secret) -> None:
    """Raise one ``InvalidArgument`` listing every problem of the spec and the secret."""
    problems = validate_provider_spec(spec) + validate_secret(secret)
    if problems:
        raise MachineError(Code.InvalidArgument, "invalid providerSpec or secret: " + "; ".join(problems))


def _tags(tags: dict[str, str]) -> list[str]:
    problems = []
    if not any(CLUSTER_TAG_PREFIX in key for key in tags):
        problems.append(f"providerSpec.tags: a tag of the form {CLUSTER_TAG_PREFIX}<name> is required")
    if not any(ROLE_TAG_PREFIX in key and CLUSTER_TAG_PREFIX not in key for key in tags):
        problems.append(f"providerSpec.tags: a tag of the form {ROLE_TAG_PREFIX}<role> is required")
    return problems


def _block_devices(devices: list[BlockDeviceSpec]) -> list[str]:
    """An empty list is valid here (only creation needs a root disk), as upstream."""
    problems = []
    several = len(devices) > 1
    for i, disk in enumerate(devices):
        path = f"providerSpec.blockDevices[{i}]"
        name = disk.device_name or ""
        ebs = disk.ebs_or_empty
        if name != ROOT_DEVICE and several and not DATA_DEVICE_NAME.match(name):
            problems.append(
                f"{path}.deviceName: {name!r} must be {ROOT_DEVICE} or match {DATA_DEVICE_NAME.pattern}"
            )
        if ebs.volume_type not in VOLUME_TYPES:
            problems.append(f"{path}.ebs.volumeType: must be one of {', '.join(VOLUME_TYPES)}")
        if (ebs.volume_size or 0) <= 0:
            problems.append(f"{path}.ebs.volumeSize: must be greater than 0")
        iops = ebs.iops or 0
        if iops < 0 or (ebs.volume_type == "io1" and iops == 0):
            problems.append(f"{path}.ebs.iops: must not be negative, and is required for io1 volumes")
        if ebs.throughput is not None and ebs.throughput <= 0:
            problems.append(f"{path}.ebs.throughput: must be greater than 0 when set")
    roots = sum(1 for d in devices if d.device_name == ROOT_DEVICE)
    if roots > 1 or (roots == 0 and several):
        problems.append(f"providerSpec.blockDevices: exactly one device must be named {ROOT_DEVICE}")
    for name, count in sorted(Counter(d.device_name or "" for d in devices).items()):
        if count > 1:
            problems.append(f"providerSpec.blockDevices: device name {name!r} is used {count} times")
    return problems


def _capacity_reservation(cr: CapacityReservationSpec | None) -> list[str]:
    if cr is None:
        return []
    path = "providerSpec.capacityReservation"
    if cr.preference is not None:
        if cr.id is not None or cr.resource_group_arn is not None:
            return [
                f"{path}: capacityReservationPreference cannot be set together with "
                "capacityReservationId or capacityReservationResourceGroupArn"
            ]
    elif cr.id is not None and cr.resource_group_arn is not None:
        return [f"{path}: set capacityReservationId or capacityReservationResourceGroupArn, not both"]
    return []


def _network_interfaces(nics: list[NetworkInterfaceSpec]) -> list[str]:
    if not nics:
        return ["providerSpec.networkInterfaces: at least one network interface is required"]
    problems = []
    for i, nic in enumerate(nics):
        path = f"providerSpec.networkInterfaces[{i}]"
        if not nic.subnet_id:
            problems.append(f"{path}.subnetID: subnetID is required")
        groups = nic.security_group_ids or []
        if not groups:
            problems.append(f"{path}.securityGroupIDs: at least one security group is required")
        for j, group in enumerate(groups):
            if not group.strip():
                problems.append(f"{path}.securityGroupIDs[{j}]: must not be blank")
        if nic.interface_type is not None and nic.interface_type not in INTERFACE_TYPES:
            problems.append(f"{path}.interfaceType: must be one of interface, efa, efa-only")
        if nic.network_card_index is not None and nic.network_card_index < 0:
            problems.append(f"{path}.networkCardIndex: must not be negative")
        if nic.device_index is not None and nic.device_index < 0:
            problems.append(f"{path}.deviceIndex: must not be negative")
    return problems


def _one_of(path: str, value: str | None, allowed: tuple[str, ...]) -> list[str]:
    if value is None or value in allowed:
        return []
    return [f"{path}: {value!r} is not one of {', '.join(allowed)}"]


def _metadata_options(md: MetadataOptionsSpec | None) -> list[str]:
    if md is None:
        return []
    path = "providerSpec.instanceMetadataOptions"
    problems = []
    hops = md.http_put_response_hop_limit
    if hops is not None and not 0 <= hops <= MAX_HOP_LIMIT:
        problems.append(f"{path}.httpPutResponseHopLimit: must be between 0 and {MAX_HOP_LIMIT}")
    problems += _one_of(f"{path}.httpEndpoint", md.http_endpoint, ENABLED_DISABLED)
    problems += _one_of(f"{path}.httpTokens", md.http_tokens, HTTP_TOKENS)
    problems += _one_of(f"{path}.httpProtocolIpv6", md.http_protocol_ipv6, ENABLED_DISABLED)
    return problems


def _cpu_options(cpu: CPUOptionsSpec | None) -> list[str]:
    if cpu is None:
        return []
    path = "providerSpec.cpuOptions"
    problems = []
    if (cpu.core_count is None) != (cpu.threads_per_core is None):
        problems.append(f"{path}: coreCount and threadsPerCore must be set together")
    if cpu.threads_per_core is not None and cpu.threads_per_core not in (1, 2):
        problems.append(f"{path}.threadsPerCore: must be 1 or 2")
    return problems


def _placement(placement: PlacementSpec | None) -> list[str]:
    if placement is None:
        return []
    path = "providerSpec.placement"
    problems = _one_of(f"{path}.tenancy", placement.tenancy, TENANCIES)
    problems += _one_of(f"{path}.affinity", placement.affinity, AFFINITIES)
    if placement.host_id and placement.tenancy != "host":
        problems.append(f"{path}.hostId: requires tenancy 'host'")
    if placement.partition_number is not None and placement.partition_number < 1:
        problems.append(f"{path}.partitionNumber: must be at least 1")
    return problems
