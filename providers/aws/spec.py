"""The AWS providerSpec as pydantic models, decoded the way the Go provider decodes it.

A MachineClass written for Gardener's AWS provider must decode here unchanged, so the models
follow Go's ``encoding/json`` rather than pydantic's defaults: every field is optional (required
fields are a validation rule, reported with all other problems), unknown keys are ignored, keys
match case-insensitively, ``null`` means "not set", and integers are 32-bit. Anything Go could not
decode (a string where a list belongs, an integer overflow) is a decode error, which the driver
reports as ``Internal`` like upstream does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from providers.errors import Code, MachineError

Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]

#: providerSpec ``deviceName`` that stands for the AMI's root device
ROOT_DEVICE = "/root"
CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
ROLE_TAG_PREFIX = "kubernetes.io/role/"


class _GoJSON(BaseModel):
    """Go's decoder: exact key first, else a case-insensitive match; other keys are dropped."""

    model_config = ConfigDict(populate_by_name=False, extra="ignore", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _fold_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        aliases = {(f.alias or name): name for name, f in cls.model_fields.items()}
        folded = {alias.casefold(): alias for alias in aliases}
        out: dict[str, Any] = {}
        for key, value in data.items():
            if not isinstance(key, str):
                continue
            alias = key if key in aliases else folded.get(key.casefold())
            if alias is None or (alias in out and key != alias):
                continue  # an exact match wins over a case-folded one
            out[alias] = value
        return out


class EbsSpec(_GoJSON):
    delete_on_termination: bool | None = Field(None, alias="deleteOnTermination")
    encrypted: bool | None = Field(None, alias="encrypted")
    iops: Int32 | None = Field(None, alias="iops")
    throughput: Int32 | None = Field(None, alias="throughput")
    kms_key_id: str | None = Field(None, alias="kmsKeyID")
    snapshot_id: str | None = Field(None, alias="snapshotID")
    volume_size: Int32 | None = Field(None, alias="volumeSize")
    volume_type: str | None = Field(None, alias="volumeType")


class BlockDeviceSpec(_GoJSON):
    device_name: str | None = Field(None, alias="deviceName")
    ebs: EbsSpec | None = Field(None, alias="ebs")
    no_device: str | None = Field(None, alias="noDevice")
    virtual_name: str | None = Field(None, alias="virtualName")

    @property
    def ebs_or_empty(self) -> EbsSpec:
        return self.ebs or EbsSpec()


class CapacityReservationSpec(_GoJSON):
    preference: str | None = Field(None, alias="capacityReservationPreference")
    id: str | None = Field(None, alias="capacityReservationId")
    resource_group_arn: str | None = Field(None, alias="capacityReservationResourceGroupArn")
    #: newer upstream: launch into an ML capacity block (market type ``capacity-block``)
    is_ml_capacity_block: bool | None = Field(None, alias="isMLCapacityBlock")


class IAMSpec(_GoJSON):
    name: str | None = Field(None, alias="name")
    arn: str | None = Field(None, alias="arn")


class NetworkInterfaceSpec(_GoJSON):
    associate_public_ip_address: bool | None = Field(None, alias="associatePublicIPAddress")
    ipv6_address_count: Int32 | None = Field(None, alias="ipv6AddressCount")
    ipv6_prefix_count: Int32 | None = Field(None, alias="ipv6PrefixCount")
    delete_on_termination: bool | None = Field(None, alias="deleteOnTermination")
    description: str | None = Field(None, alias="description")
    security_group_ids: list[str] | None = Field(None, alias="securityGroupIDs")
    subnet_id: str | None = Field(None, alias="subnetID")
    interface_type: str | None = Field(None, alias="interfaceType")
    network_card_index: Int32 | None = Field(None, alias="networkCardIndex")
    device_index: Int32 | None = Field(None, alias="deviceIndex")
    primary_ipv6: bool | None = Field(None, alias="primaryIpv6")


class MetadataOptionsSpec(_GoJSON):
    http_endpoint: str | None = Field(None, alias="httpEndpoint")
    http_put_response_hop_limit: Int32 | None = Field(None, alias="httpPutResponseHopLimit")
    http_tokens: str | None = Field(None, alias="httpTokens")
    http_protocol_ipv6: str | None = Field(None, alias="httpProtocolIpv6")


class CPUOptionsSpec(_GoJSON):
    core_count: Int32 | None = Field(None, alias="coreCount")
    threads_per_core: Int32 | None = Field(None, alias="threadsPerCore")
    amd_sev_snp: str | None = Field(None, alias="amdSevSnp")


class PlacementSpec(_GoJSON):
    group_id: str | None = Field(None, alias="groupId")
    tenancy: str | None = Field(None, alias="tenancy")
    host_id: str | None = Field(None, alias="hostId")
    partition_number: Int32 | None = Field(None, alias="partitionNumber")
    affinity: str | None = Field(None, alias="affinity")


class InstanceMarketOptionsSpec(_GoJSON):
    market_type: str | None = Field(None, alias="marketType")


class AWSProviderSpec(_GoJSON):
    api_version: str | None = Field(None, alias="apiVersion")
    ami: str | None = Field(None, alias="ami")
    region: str | None = Field(None, alias="region")
    machine_type: str | None = Field(None, alias="machineType")
    iam: IAMSpec | None = Field(None, alias="iam")
    key_name: str | None = Field(None, alias="keyName")
    ebs_optimized: bool | None = Field(None, alias="ebsOptimized")
    monitoring: bool | None = Field(None, alias="monitoring")
    block_devices: list[BlockDeviceSpec] | None = Field(None, alias="blockDevices")
    capacity_reservation: CapacityReservationSpec | None = Field(None, alias="capacityReservation")
    network_interfaces: list[NetworkInterfaceSpec] | None = Field(None, alias="networkInterfaces")
    #: deprecated upstream in favour of instanceMarketOptions; "" = spot without a max price
    spot_price: str | None = Field(None, alias="spotPrice")
    src_and_dst_checks_enabled: bool | None = Field(None, alias="srcAndDstChecksEnabled")
    tags: dict[str, str] | None = Field(None, alias="tags")
    instance_metadata_options: MetadataOptionsSpec | None = Field(None, alias="instanceMetadataOptions")
    cpu_options: CPUOptionsSpec | None = Field(None, alias="cpuOptions")
    placement: PlacementSpec | None = Field(None, alias="placement")
    instance_market_options: InstanceMarketOptionsSpec | None = Field(None, alias="instanceMarketOptions")

    @property
    def tag_map(self) -> dict[str, str]:
        return dict(self.tags or {})

    @property
    def cluster_tag_key(self) -> str:
        return _tag_key_containing(self.tag_map, CLUSTER_TAG_PREFIX)

    @property
    def role_tag_key(self) -> str:
        return _tag_key_containing(self.tag_map, ROLE_TAG_PREFIX)

    @property
    def source_dest_check_disabled(self) -> bool:
        """Only an explicit ``false`` turns the check off (NAT instances); unset means on."""
        return self.src_and_dst_checks_enabled is False


def _tag_key_containing(tags: Mapping[str, str], marker: str) -> str:
    """Upstream matches by substring, and a key never counts as both cluster and role tag."""
    found = ""
    for key in sorted(tags):
        if marker == ROLE_TAG_PREFIX and CLUSTER_TAG_PREFIX in key:
            continue
        if marker in key:
            found = key
    return found


def decode_provider_spec(raw: Any) -> AWSProviderSpec:
    """The MachineClass's providerSpec (dict, JSON text or bytes); undecodable → ``Internal``."""
    try:
        if isinstance(raw, bytes | bytearray):
            raw = raw.decode()
        if isinstance(raw, str):
            raw = json.loads(raw)
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise TypeError(f"providerSpec must be a JSON object, not {type(raw).__name__}")
        return AWSProviderSpec.model_validate(raw)
    except (ValueError, TypeError) as err:
        raise MachineError(Code.Internal, f"cannot decode providerSpec: {_short(err)}") from None


def _short(err: Exception) -> str:
    """Field paths and error kinds only: pydantic's default text would echo the input values."""
    if isinstance(err, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in err.errors()
        )
    return str(err)
