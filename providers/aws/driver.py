"""The AWS driver: MCM's Driver contract on EC2 through boto3 (upstream
``machine-controller-manager-provider-aws``).

Every machine method starts the same way: the class must be for ``AWS`` (else
``InvalidArgument``), its providerSpec must decode (else ``Internal``) and, together with the
secret, pass every rule (else one ``InvalidArgument`` listing all problems). The decisions
(request building, filters, what initialization still lacks) live in ``instances``; the instance
calls the methods share (lookups, waiting for visibility, termination) in ``instance_io``; this
module runs the contract's methods on them and turns EC2's answers into responses and machine codes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from mcm_tasks.api import Machine, MachineClass
from mcm_tasks.redisdb import get_redis, rkey
from mcm_tasks.settings import Settings, get_settings
from providers.aws import errors, instances
from providers.aws.client import CachedClient, ClientCache, ClientFactory, ClientSettings
from providers.aws.instance_io import InstanceIO, machine_name_of, provider_id_of
from providers.aws.ratelimit import RequestLimiter
from providers.aws.secret import AWSCredentials, credentials_from, sensitive_values, user_data
from providers.aws.spec import AWSProviderSpec, decode_provider_spec
from providers.aws.validation import check_provider_spec_and_secret
from providers.aws.volumes import volume_ids
from providers.driver import (
    CreateMachineRequest,
    CreateMachineResponse,
    DeleteMachineRequest,
    DeleteMachineResponse,
    GetMachineStatusRequest,
    GetMachineStatusResponse,
    GetVolumeIDsRequest,
    GetVolumeIDsResponse,
    InitializeMachineRequest,
    InitializeMachineResponse,
    ListMachinesRequest,
    ListMachinesResponse,
    Secret,
)
from providers.errors import Code, MachineError
from providers.metrics import driver_operation

log = logging.getLogger(__name__)

PROVIDER = "AWS"
_LABEL = "aws"


def _node_template_annotations(machine: Machine) -> dict[str, str]:
    template = getattr(machine.spec, "node_template", None)
    metadata = getattr(template, "metadata", None) if template is not None else None
    return dict(getattr(metadata, "annotations", None) or {})


class AWSDriver(InstanceIO):
    """One per worker process (``providers.get_driver``), holding the client cache.

    Options not given come from the settings (``MCM_AWS_*``). The shared EC2 request limiter is on
    when the driver is given a ``redis_url``; ``from_settings``, which ``get_driver`` uses in every
    worker, gives it the workers' Redis unless ``aws_rate_limit`` is off.
    """

    def __init__(
        self,
        endpoint_url: str | None = None,
        redis_url: str | None = None,
        describe_timeout: float | None = None,
        *,
        page_size: int = 1000,
        max_attempts: int = 5,
        rate_limit_qps: float | None = None,
        rate_limit_burst: int | None = None,
        rate_limit_max_wait: float | None = None,
        client_factory: ClientFactory | None = None,
        sleep: Callable[[float], None] = time.sleep,
        settings: Settings | None = None,
    ) -> None:
        s = settings or get_settings()
        max_wait = rate_limit_max_wait if rate_limit_max_wait is not None else s.aws_rate_limit_max_wait
        self.endpoint_url = endpoint_url or s.aws_endpoint_url or None
        self.describe_timeout = describe_timeout if describe_timeout is not None else s.aws_describe_timeout
        self.page_size = page_size
        self._sleep = sleep
        self.limiter: RequestLimiter | None = None
        if redis_url:
            self.limiter = RequestLimiter(
                get_redis(redis_url),
                rkey("ratelimit", "aws"),
                qps=rate_limit_qps if rate_limit_qps is not None else s.aws_rate_limit_qps,
                burst=rate_limit_burst if rate_limit_burst is not None else s.aws_rate_limit_burst,
                max_wait=max_wait,
            )
        client_settings = ClientSettings(endpoint_url=self.endpoint_url, max_attempts=max_attempts)
        self.clients = ClientCache(client_settings, limiter=self.limiter, factory=client_factory)

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> AWSDriver:
        """The production driver: every option from the settings, the shared EC2 limiter on the
        workers' Redis unless ``aws_rate_limit`` is off."""
        s = settings or get_settings()
        return cls(redis_url=s.redis_url if s.aws_rate_limit else None, settings=s)

    def __repr__(self) -> str:
        return f"AWSDriver(endpoint_url={self.endpoint_url!r})"

    # --- shared steps ---------------------------------------------------------------------------

    def _prepare(self, machine_class: MachineClass, secret: Secret) -> tuple[AWSProviderSpec, AWSCredentials]:
        provider = getattr(machine_class, "provider", None)
        if provider != PROVIDER:
            raise MachineError(
                Code.InvalidArgument,
                f"requested for provider {provider!r}, this driver only serves {PROVIDER!r}",
            )
        spec = decode_provider_spec(getattr(machine_class, "provider_spec", None))
        check_provider_spec_and_secret(spec, secret)
        return spec, credentials_from(secret)

    def _client(
        self, spec: AWSProviderSpec, creds: AWSCredentials, secret: Secret, code: Code
    ) -> CachedClient:
        try:
            return self.clients.get(spec.region or "", creds)
        except Exception as err:
            raise errors.to_machine_error(
                code, "creating the EC2 client", err, sensitive_values(secret)
            ) from None

    # --- the contract ---------------------------------------------------------------------------

    def create_machine(self, req: CreateMachineRequest) -> CreateMachineResponse:
        with driver_operation(_LABEL, "create_machine"):
            spec, creds = self._prepare(req.machine_class, req.secret)
            client = self._client(spec, creds, req.secret, Code.Internal)
            secrets = sensitive_values(req.secret)
            name = machine_name_of(req.machine)
            try:
                images = client.ec2.describe_images(ImageIds=[spec.ami]).get("Images", [])
            except Exception as err:
                raise errors.to_machine_error(
                    errors.code_for_image_lookup(err), f"DescribeImages {spec.ami}", err, secrets
                ) from None
            if not images:
                raise MachineError(Code.NotFound, f"image {spec.ami} not found")
            try:
                request = instances.run_instances_input(
                    spec,
                    name,
                    _node_template_annotations(req.machine),
                    str(images[0].get("RootDeviceName", "")),
                    user_data(req.secret),
                )
            except instances.SpecError as err:
                raise MachineError(Code.InvalidArgument, str(err)) from None
            except ValueError as err:
                raise MachineError(Code.Internal, str(err)) from None
            try:
                result = client.ec2.run_instances(**request)
            except Exception as err:
                raise errors.to_machine_error(
                    errors.code_for_create(err), "RunInstances", err, secrets
                ) from None
            launched = next((i for i in result.get("Instances", []) if i.get("InstanceId")), None)
            if launched is None:
                raise MachineError(
                    Code.Internal, f"RunInstances returned no instance ID for machine {name!r}"
                )
            instance_id = str(launched["InstanceId"])
            provider_id = instances.encode_provider_id(client.region, instance_id)
            log.info("launched %s for machine %s, waiting until EC2 shows it", provider_id, name)
            visible = self._wait_visible(client, instance_id, req.secret)
            if visible is None:
                raise MachineError(
                    Code.Internal,
                    f"VM {provider_id} of machine {name!r} did not become visible within "
                    f"{self.describe_timeout:g}s; a duplicate VM may appear and will be orphan-collected",
                )
            node_name = str(visible.get("PrivateDnsName") or launched.get("PrivateDnsName") or "")
            if not node_name:
                raise MachineError(
                    Code.Internal, f"VM {provider_id} of machine {name!r} has no private DNS name yet"
                )
            return CreateMachineResponse(
                provider_id=provider_id, node_name=node_name, addresses=instances.node_addresses(visible)
            )

    def initialize_machine(self, req: InitializeMachineRequest) -> InitializeMachineResponse:
        """Per ENI: assign missing IPv6 prefixes, disable SourceDestCheck for NAT instances.
        Every failure after validation is ``Uninitialized``, so the controller simply retries."""
        with driver_operation(_LABEL, "initialize_machine"):
            spec, creds = self._prepare(req.machine_class, req.secret)
            secrets = sensitive_values(req.secret)
            try:
                client = self._client(spec, creds, req.secret, Code.Uninitialized)
                instance = self._matching_instances(client, spec, req.machine, req.secret)[0]
                instance_id = str(instance.get("InstanceId", ""))
                for eni_id, missing in instances.ipv6_prefix_deficits(spec, instance):
                    log.info("assigning %d IPv6 prefix(es) to %s of %s", missing, eni_id, instance_id)
                    client.ec2.assign_ipv6_addresses(NetworkInterfaceId=eni_id, Ipv6PrefixCount=missing)
                if spec.source_dest_check_disabled:
                    self._disable_source_dest_check(client, instance)
            except MachineError as err:
                raise MachineError(Code.Uninitialized, err.message) from None
            except Exception as err:
                raise errors.to_machine_error(
                    Code.Uninitialized, "initializing the VM", err, secrets
                ) from None
            return InitializeMachineResponse(
                provider_id=instances.encode_provider_id(client.region, instance_id),
                node_name=str(instance.get("PrivateDnsName") or ""),
                addresses=instances.node_addresses(instance),
            )

    def delete_machine(self, req: DeleteMachineRequest) -> DeleteMachineResponse:
        with driver_operation(_LABEL, "delete_machine"):
            spec, creds = self._prepare(req.machine_class, req.secret)
            client = self._client(spec, creds, req.secret, Code.Internal)
            provider_id = provider_id_of(req.machine)
            if provider_id:
                try:
                    _, instance_id = instances.decode_provider_id(provider_id)
                except ValueError as err:
                    raise MachineError(Code.InvalidArgument, str(err)) from None
                self._terminate(client, instance_id, req.secret)
                return DeleteMachineResponse()
            name = machine_name_of(req.machine)
            found = self._tagged(client, spec, req.secret, name)
            if not found:
                log.info("no VM found for machine %s, nothing to delete", name)
            for instance in found:
                self._terminate(client, str(instance["InstanceId"]), req.secret)
            return DeleteMachineResponse()

    def get_machine_status(self, req: GetMachineStatusRequest) -> GetMachineStatusResponse:
        with driver_operation(_LABEL, "get_machine_status"):
            spec, creds = self._prepare(req.machine_class, req.secret)
            client = self._client(spec, creds, req.secret, Code.Internal)
            found = self._matching_instances(client, spec, req.machine, req.secret)
            name = machine_name_of(req.machine)
            if len(found) > 1:
                ids = ", ".join(str(i.get("InstanceId")) for i in found)
                raise MachineError(Code.OutOfRange, f"machine {name!r} is backed by several VMs: {ids}")
            instance = found[0]
            provider_id = instances.encode_provider_id(client.region, str(instance.get("InstanceId", "")))
            problems = instances.initialization_problems(spec, instance)
            if problems:
                raise MachineError(
                    Code.Uninitialized, f"VM {provider_id} of machine {name!r}: " + "; ".join(problems)
                )
            return GetMachineStatusResponse(
                provider_id=provider_id,
                node_name=str(instance.get("PrivateDnsName") or ""),
                addresses=instances.node_addresses(instance),
            )

    def list_machines(self, req: ListMachinesRequest) -> ListMachinesResponse:
        """providerID → the ``Name`` tag (the machine's name) for every live VM of the class's
        cluster and role."""
        with driver_operation(_LABEL, "list_machine"):
            spec, creds = self._prepare(req.machine_class, req.secret)
            client = self._client(spec, creds, req.secret, Code.Internal)
            found = self._tagged(client, spec, req.secret)
            return ListMachinesResponse(
                machine_list={
                    instances.encode_provider_id(client.region, str(i["InstanceId"])): instances.name_tag(i)
                    for i in found
                    if i.get("InstanceId")
                }
            )

    def get_volume_ids(self, req: GetVolumeIDsRequest) -> GetVolumeIDsResponse:
        with driver_operation(_LABEL, "get_volume_ids"):
            return GetVolumeIDsResponse(volume_ids=volume_ids(req.pv_specs))
