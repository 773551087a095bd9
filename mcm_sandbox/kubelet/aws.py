"""EC2 instances at an endpoint (moto in the sandbox) as the kubelet simulator's VMs.

With AWS classes the sandbox has no local-cloud records to read: the instances the AWS driver
launched live in moto. This source lists them with DescribeInstances (paginated, live states
only) and presents each as a :class:`~mcm_sandbox.kubelet.node.KubeletVM`, named the way a
real node on EC2 is named and identified the way the AWS driver identifies it:

- Node name = the instance's ``PrivateDnsName`` (the driver's CreateMachine answers with it);
- ``spec.providerID`` = ``aws:///<region>/<instance-id>``, the driver's own encoding;
- labels for instance type, zone, region and architecture; capacity from DescribeInstanceTypes.

Instances shutting down or terminated are not listed, so their Nodes stop heartbeating and go
Unknown like a vanished local VM; a running instance joins at once (no boot delay).

Regions: the ones given, else every region the endpoint reports (DescribeRegions), scanned in
full every ``rescan`` seconds; between full scans only regions that had live instances are read,
so a tick costs a request per busy region rather than one per region of the world.

Which instances' Nodes were registered is kept in one Redis hash, so a Node deleted by hand is not
registered again by the same instance, even across restarts of the simulator.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import boto3
import redis
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, Field

from mcm_sandbox.kubelet import node as kn
from mcm_tasks.redisdb import rkey
from providers.aws.instances import LIVE_STATES, encode_provider_id

log = logging.getLogger(__name__)

AWS_PROVIDER_PREFIX = "aws:///"
#: EC2's architecture names → Kubernetes' (GOARCH)
ARCHITECTURES = {
    "x86_64": "amd64",
    "x86_64_mac": "amd64",
    "arm64": "arm64",
    "arm64_mac": "arm64",
    "i386": "386",
}
DEFAULT_PODS = "110"
#: DescribeRegions needs some region to ask; moto and EC2 answer with all of them from any
DISCOVERY_REGION = "us-east-1"
SANDBOX_CREDENTIAL = "mcm-sandbox"


class AwsVM(BaseModel):
    id: str
    provider_id: str
    node_name: str
    zone: str
    region: str
    instance_type: str
    architecture: str
    capacity: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    internal_ip: str = ""
    state: str
    launched: float
    registered_at: float | None = None

    def joins(self, now: float) -> bool:
        return self.state == "running"


def instance_vm(
    instance: Mapping[str, Any], region: str, capacity: Mapping[str, str], registered_at: float | None
) -> AwsVM | None:
    """The VM of one DescribeInstances entry; None for an instance that is gone (shutting down,
    terminated) or cannot name a Node (no private DNS name)."""
    state = str((instance.get("State") or {}).get("Name") or "")
    node_name = str(instance.get("PrivateDnsName") or "")
    if state not in LIVE_STATES or not node_name:
        return None
    launched = instance.get("LaunchTime")
    arch = str(instance.get("Architecture") or "x86_64")
    return AwsVM(
        id=str(instance["InstanceId"]),
        provider_id=encode_provider_id(region, str(instance["InstanceId"])),
        node_name=node_name,
        zone=str((instance.get("Placement") or {}).get("AvailabilityZone") or ""),
        region=region,
        instance_type=str(instance.get("InstanceType") or ""),
        architecture=ARCHITECTURES.get(arch, arch),
        capacity=dict(capacity),
        internal_ip=str(instance.get("PrivateIpAddress") or ""),
        state=state,
        launched=launched.timestamp() if isinstance(launched, datetime) else 0.0,
        registered_at=registered_at,
    )


def instance_type_capacity(info: Mapping[str, Any]) -> dict[str, str]:
    """A Node's capacity from a DescribeInstanceTypes entry (what the instance's kubelet sees)."""
    out = {"pods": DEFAULT_PODS}
    cpus = (info.get("VCpuInfo") or {}).get("DefaultVCpus")
    memory = (info.get("MemoryInfo") or {}).get("SizeInMiB")
    if cpus:
        out["cpu"] = str(cpus)
    if memory:
        out["memory"] = f"{memory}Mi"
    return out


def regions_to_scan(
    configured: Sequence[str],
    known: Iterable[str],
    active: Iterable[str],
    last_full_scan: float | None,
    now: float,
    rescan: float,
) -> tuple[list[str], bool]:
    """(regions to read this tick, whether that is a full scan). Configured regions are always
    read; else all known regions once every ``rescan`` seconds, and the active ones between."""
    if configured:
        return sorted(set(configured)), True
    if last_full_scan is None or now - last_full_scan >= rescan:
        return sorted(set(known)), True
    return sorted(set(active)), False


def is_aws_node(node: dict[str, Any]) -> bool:
    return str((node.get("spec") or {}).get("providerID") or "").startswith(AWS_PROVIDER_PREFIX)


@dataclass
class AwsSettings:
    endpoint_url: str
    #: empty: discover the endpoint's regions
    regions: tuple[str, ...] = ()
    rescan: float = 10.0
    page_size: int = 500
    access_key_id: str = field(
        default_factory=lambda: os.environ.get("AWS_ACCESS_KEY_ID", SANDBOX_CREDENTIAL)
    )
    secret_access_key: str = field(
        default_factory=lambda: os.environ.get("AWS_SECRET_ACCESS_KEY", SANDBOX_CREDENTIAL), repr=False
    )

    def config(self) -> Config:
        """Short timeouts and few retries: a tick that cannot list is skipped, not stalled."""
        return Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=15)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RegistrationBook:
    """Instance id → when its Node was registered, in one Redis hash."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self.key = rkey("kubelet", "aws", "registered")

    def all(self) -> dict[str, float]:
        return {_text(k): float(_text(v)) for k, v in self.r.hgetall(self.key).items()}

    def mark(self, instance_id: str, when: float) -> None:
        self.r.hset(self.key, instance_id, str(when))

    def keep_only(self, known: dict[str, float], live_ids: set[str]) -> None:
        """Forget instances that are gone, so the hash does not grow with every machine ever run."""
        stale = [i for i in known if i not in live_ids]
        if stale:
            self.r.hdel(self.key, *stale)


class AwsSource:
    """The live EC2 instances at ``settings.endpoint_url`` (see the module's docstring)."""

    def __init__(
        self, settings: AwsSettings, client: redis.Redis, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.book = RegistrationBook(client)
        self.clock = clock
        self._session = boto3.Session(
            aws_access_key_id=settings.access_key_id, aws_secret_access_key=settings.secret_access_key
        )
        self._clients: dict[str, Any] = {}
        self._known_regions: list[str] = []
        self._active: set[str] = set()
        self._last_full_scan: float | None = None
        self._capacity: dict[tuple[str, str], dict[str, str]] = {}

    def _ec2(self, region: str) -> Any:
        if region not in self._clients:
            self._clients[region] = self._session.client(
                "ec2",
                region_name=region,
                endpoint_url=self.settings.endpoint_url,
                config=self.settings.config(),
            )
        return self._clients[region]

    def _regions(self, now: float) -> tuple[list[str], bool]:
        if not self.settings.regions and not self._known_regions:
            answer = self._ec2(DISCOVERY_REGION).describe_regions(AllRegions=False)
            self._known_regions = sorted(str(r["RegionName"]) for r in answer.get("Regions") or [])
        return regions_to_scan(
            self.settings.regions, self._known_regions, self._active, self._last_full_scan, now,
            self.settings.rescan,
        )  # fmt: skip

    def _instances(self, region: str) -> list[Mapping[str, Any]]:
        pages = (
            self._ec2(region)
            .get_paginator("describe_instances")
            .paginate(
                Filters=[{"Name": "instance-state-name", "Values": list(LIVE_STATES)}],
                PaginationConfig={"PageSize": self.settings.page_size},
            )
        )
        return [i for page in pages for r in page.get("Reservations") or [] for i in r.get("Instances") or []]

    def _capacities(self, region: str, types: set[str]) -> None:
        missing = sorted(t for t in types if t and (region, t) not in self._capacity)
        if not missing:
            return
        try:
            answer = self._ec2(region).describe_instance_types(InstanceTypes=missing)
            for info in answer.get("InstanceTypes") or []:
                self._capacity[(region, str(info["InstanceType"]))] = instance_type_capacity(info)
        except (BotoCoreError, ClientError) as err:
            log.warning("DescribeInstanceTypes in %s failed: %s", region, type(err).__name__)
        for t in missing:  # an unknown type still gets a Node, with pods capacity only
            self._capacity.setdefault((region, t), instance_type_capacity({}))

    def live_vms(self) -> Sequence[kn.KubeletVM]:
        now = self.clock()
        regions, full = self._regions(now)
        registered = self.book.all()
        vms: list[AwsVM] = []
        active: set[str] = set()
        for region in regions:
            found = self._instances(region)
            self._capacities(region, {str(i.get("InstanceType") or "") for i in found})
            for instance in found:
                capacity = self._capacity.get((region, str(instance.get("InstanceType") or "")), {})
                vm = instance_vm(instance, region, capacity, registered.get(str(instance["InstanceId"])))
                if vm is not None:
                    vms.append(vm)
                    active.add(region)
        self._active = active
        if full:
            self._last_full_scan = now
        self.book.keep_only(registered, {vm.id for vm in vms})
        return sorted(vms, key=lambda vm: (vm.launched, vm.id))

    def owns(self, node: dict[str, Any]) -> bool:
        return is_aws_node(node)

    def mark_registered(self, vm_id: str, when: float) -> None:
        self.book.mark(vm_id, when)
