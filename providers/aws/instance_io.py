"""The EC2 calls the driver's methods share on instances (upstream provider-aws ``core_util.go``:
``getInstancesFromMachineName``, ``confirmInstanceByID``, ``terminateInstance``,
``disableSrcAndDestCheck``, and ``core.go``'s ``retryWithExponentialBackOff``): find a machine's
VMs, by tags then by providerID, wait for a new VM to become visible, terminate one, disable the
source/destination check of a NAT instance.

EC2 is eventually consistent, and these hold what that costs: a new VM may be invisible for a while,
new tags may not match yet, a terminated VM stays visible for an hour, a repeated termination may
fail. What to ask and what an answer means is decided in ``instances`` (pure); turning EC2's errors
into machine codes is ``errors``. ``AWSDriver`` (``driver``) inherits these as its shared steps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from mcm_tasks.api import Machine
from providers.aws import errors, instances
from providers.aws.client import CachedClient
from providers.aws.secret import sensitive_values
from providers.aws.spec import AWSProviderSpec
from providers.driver import Secret
from providers.errors import Code, MachineError

log = logging.getLogger(__name__)


def backoff_delays(
    total: float, first: float = 0.5, factor: float = 2.0, cap: float = 30.0
) -> Iterator[float]:
    """Sleeps of an exponential backoff that add up to exactly ``total`` seconds; counting sleeps
    rather than the wall clock makes the number of attempts the same on every run."""
    slept, delay = 0.0, first
    while slept < total:
        step = min(delay, cap, total - slept)
        yield step
        slept += step
        delay *= factor


def machine_name_of(machine: Machine) -> str:
    return str(machine.metadata.name)


def provider_id_of(machine: Machine) -> str:
    return str(getattr(machine.spec, "provider_id", "") or "")


class InstanceIO:
    """The instance calls of ``AWSDriver``, which sets what they read: the page size of
    DescribeInstances, how long a new VM may stay invisible, and how to sleep meanwhile."""

    page_size: int
    describe_timeout: float
    _sleep: Callable[[float], None]

    def _describe(self, client: CachedClient, secret: Secret, **params: Any) -> list[instances.Instance]:
        """Every instance of every page; any failure → ``Internal`` (a throttle keeps its code)."""
        try:
            if "InstanceIds" in params:  # EC2 rejects MaxResults together with instance IDs
                pages: Any = [client.ec2.describe_instances(**params)]
            else:
                paginator = client.ec2.get_paginator("describe_instances")
                pages = paginator.paginate(**params, PaginationConfig={"PageSize": self.page_size})
            return [i for page in pages for r in page.get("Reservations", []) for i in r.get("Instances", [])]
        except Exception as err:
            if errors.is_instance_not_found(err):
                return []
            raise errors.to_machine_error(
                Code.Internal, "DescribeInstances", err, sensitive_values(secret)
            ) from None

    def _tagged(
        self, client: CachedClient, spec: AWSProviderSpec, secret: Secret, machine_name: str | None = None
    ) -> list[instances.Instance]:
        """VMs by tag filters, checked again here: EC2 ANDs two ``tag-key`` filters, but moto
        keeps only the last one, and a VM of another cluster must never look like ours."""
        filters = (
            instances.class_filters(spec)
            if machine_name is None
            else instances.machine_filters(spec, machine_name)
        )
        return [
            i
            for i in self._describe(client, secret, Filters=filters)
            if instances.belongs_to_class(spec, i)
            and (machine_name is None or instances.name_tag(i) == machine_name)
        ]

    def _matching_instances(
        self, client: CachedClient, spec: AWSProviderSpec, machine: Machine, secret: Secret
    ) -> list[instances.Instance]:
        """By tags; when tags find nothing (new tags are eventually consistent), by providerID.
        Unlike upstream the fallback also requires a live state: a terminated VM stays visible
        for an hour and must not count as the machine's VM."""
        name = machine_name_of(machine)
        found = self._tagged(client, spec, secret, name)
        if found:
            return found
        provider_id = provider_id_of(machine)
        if not provider_id:
            raise MachineError(
                Code.NotFound, f"no VM found for machine {name!r} by tags, and it has no providerID"
            )
        try:
            _, instance_id = instances.decode_provider_id(provider_id)
        except ValueError as err:
            raise MachineError(Code.InvalidArgument, str(err)) from None
        found = [i for i in self._describe(client, secret, InstanceIds=[instance_id]) if instances.is_live(i)]
        if not found:
            raise MachineError(Code.NotFound, f"no VM found for machine {name!r} (providerID {provider_id})")
        return found

    def _wait_visible(
        self, client: CachedClient, instance_id: str, secret: Secret
    ) -> instances.Instance | None:
        """EC2 is eventually consistent: a new instance may be invisible to DescribeInstances."""
        for delay in [*backoff_delays(self.describe_timeout), None]:
            try:
                found = self._describe(client, secret, InstanceIds=[instance_id])
            except MachineError as err:
                log.info("waiting for instance %s to become visible: %s", instance_id, err.message)
                found = []
            if found:
                return found[0]
            if delay is not None:
                self._sleep(delay)
        return None

    def _terminate(self, client: CachedClient, instance_id: str, secret: Secret) -> None:
        """An instance EC2 does not know is already gone (orphan collection covers the rare
        eventual-consistency case where it still exists)."""
        try:
            client.ec2.terminate_instances(InstanceIds=[instance_id])
        except Exception as err:
            code = errors.code_for_terminate(err)
            if code is Code.NotFound:
                log.info("instance %s not found on termination, treating it as terminated", instance_id)
                return
            if self._already_terminating(client, instance_id, secret):
                log.info("instance %s is already terminating (%s)", instance_id, errors.describe(err))
                return
            raise errors.to_machine_error(
                code, f"TerminateInstances {instance_id}", err, sensitive_values(secret)
            ) from None
        log.info("terminated instance %s", instance_id)

    def _already_terminating(self, client: CachedClient, instance_id: str, secret: Secret) -> bool:
        """A repeated or concurrent termination may fail (moto even fails every repeat once the
        ENIs are gone); a VM that is shutting down or terminated is deleted all the same."""
        try:
            found = self._describe(client, secret, InstanceIds=[instance_id])
        except MachineError:
            return False
        return bool(found) and all(not instances.is_live(i) for i in found)

    def _disable_source_dest_check(self, client: CachedClient, instance: instances.Instance) -> None:
        for eni_id in instances.enis_with_source_dest_check(instance):
            client.ec2.modify_network_interface_attribute(
                NetworkInterfaceId=eni_id, SourceDestCheck={"Value": False}
            )
        if not instance.get("NetworkInterfaces") and instance.get("SourceDestCheck", True):
            client.ec2.modify_instance_attribute(
                InstanceId=instance["InstanceId"], SourceDestCheck={"Value": False}
            )
