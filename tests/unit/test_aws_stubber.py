"""What moto cannot produce, at the boto3 client boundary with botocore's Stubber: EC2 capacity
and quota errors, an instance that never becomes visible, a launch without a DNS name, and IPv6
prefixes that EC2 did assign. The driver runs unchanged; only the client under it is stubbed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from prometheus_client import REGISTRY

from providers.aws import AWSDriver, errors
from providers.aws.client import ClientSettings
from providers.aws.secret import AWSCredentials
from providers.driver import CreateMachineRequest, GetMachineStatusRequest, InitializeMachineRequest
from providers.errors import Code, MachineError
from tests.integration.moto_fixture import (
    CLUSTER_TAG,
    REGION,
    ROLE_TAG,
    make_machine,
    make_machine_class,
    make_secret,
    provider_spec,
)

AMI = "ami-00000001"
IMAGE = {"Images": [{"ImageId": AMI, "RootDeviceName": "/dev/xvda"}]}


def _instance(
    instance_id: str = "i-0123456789abcdef0", dns: str = "ip-10-0-0-9.eu-west-1.compute.internal"
) -> Any:
    return {
        "InstanceId": instance_id,
        "PrivateDnsName": dns,
        "PrivateIpAddress": "10.0.0.9",
        "State": {"Name": "running"},
        "Tags": [{"Key": k, "Value": "1"} for k in (CLUSTER_TAG, ROLE_TAG)]
        + [{"Key": "Name", "Value": "m-1"}],
    }


class StubbedDriver:
    """An AWSDriver whose EC2 client is a real boto3 client with a Stubber in front of it."""

    def __init__(self, **driver_options: Any) -> None:
        self.client = boto3.client(
            "ec2", region_name=REGION, aws_access_key_id="AKIASTUB", aws_secret_access_key="stub-secret"
        )
        self.stub = Stubber(self.client)
        self.sleeps: list[float] = []

        def factory(region: str, creds: AWSCredentials, settings: ClientSettings) -> Any:
            return self.client

        self.driver = AWSDriver(client_factory=factory, sleep=self.sleeps.append, **driver_options)

    def create(self) -> Any:
        req = CreateMachineRequest(
            machine=make_machine("m-1"),
            machine_class=make_machine_class(provider_spec()),
            secret=make_secret(),
        )
        with self.stub:
            return self.driver.create_machine(req)


@pytest.fixture()
def stubbed() -> Iterator[StubbedDriver]:
    s = StubbedDriver(describe_timeout=4.0)
    yield s
    s.stub.assert_no_pending_responses()


@pytest.mark.parametrize("code", sorted(errors.RESOURCE_EXHAUSTED))
def test_run_instances_capacity_errors_are_resource_exhausted(stubbed: StubbedDriver, code: str) -> None:
    before = REGISTRY.get_sample_value(
        "mcm_cloud_api_driver_requests_failed_total",
        {"provider": "aws", "operation": "create_machine", "error_code": "ResourceExhausted"},
    )
    stubbed.stub.add_response("describe_images", IMAGE, {"ImageIds": [AMI]})
    stubbed.stub.add_client_error(
        "run_instances", service_error_code=code, service_message="no capacity in zone"
    )
    with pytest.raises(MachineError) as err:
        stubbed.create()
    assert err.value.code is Code.ResourceExhausted and code in err.value.message
    after = REGISTRY.get_sample_value(
        "mcm_cloud_api_driver_requests_failed_total",
        {"provider": "aws", "operation": "create_machine", "error_code": "ResourceExhausted"},
    )
    assert (after or 0) == (before or 0) + 1


def test_other_run_instances_errors_are_internal(stubbed: StubbedDriver) -> None:
    stubbed.stub.add_response("describe_images", IMAGE, {"ImageIds": [AMI]})
    stubbed.stub.add_client_error("run_instances", service_error_code="InvalidParameterValue")
    with pytest.raises(MachineError) as err:
        stubbed.create()
    assert err.value.code is Code.Internal


def test_capacity_errors_on_the_image_lookup_are_resource_exhausted_too(stubbed: StubbedDriver) -> None:
    stubbed.stub.add_client_error("describe_images", service_error_code="Unsupported")
    with pytest.raises(MachineError) as err:
        stubbed.create()
    assert err.value.code is Code.ResourceExhausted


def test_an_empty_image_answer_is_not_found(stubbed: StubbedDriver) -> None:
    stubbed.stub.add_response("describe_images", {"Images": []}, {"ImageIds": [AMI]})
    with pytest.raises(MachineError) as err:
        stubbed.create()
    assert err.value.code is Code.NotFound


def _launch(stubbed: StubbedDriver, dns: str = "ip-10-0-0-9.eu-west-1.compute.internal") -> None:
    stubbed.stub.add_response("describe_images", IMAGE, {"ImageIds": [AMI]})
    stubbed.stub.add_response("run_instances", {"Instances": [_instance(dns=dns)]})


def _invisible(stubbed: StubbedDriver, times: int) -> None:
    for _ in range(times):
        stubbed.stub.add_client_error("describe_instances", service_error_code="InvalidInstanceID.NotFound")


def test_an_instance_that_stays_invisible_times_out_as_internal(stubbed: StubbedDriver) -> None:
    _launch(stubbed)
    _invisible(stubbed, 5)  # the first look plus one per sleep of backoff_delays(4.0)
    with pytest.raises(MachineError) as err:
        stubbed.create()
    assert err.value.code is Code.Internal and "did not become visible within 4s" in err.value.message
    assert stubbed.sleeps == [0.5, 1.0, 2.0, 0.5]


def test_an_instance_that_appears_late_is_created(stubbed: StubbedDriver) -> None:
    _launch(stubbed)
    _invisible(stubbed, 2)
    stubbed.stub.add_response("describe_instances", {"Reservations": [{"Instances": [_instance()]}]})
    resp = stubbed.create()
    assert resp.provider_id == f"aws:///{REGION}/i-0123456789abcdef0"
    assert resp.node_name == "ip-10-0-0-9.eu-west-1.compute.internal"
    assert stubbed.sleeps == [0.5, 1.0]


def test_a_vm_without_private_dns_name_is_internal(stubbed: StubbedDriver) -> None:
    _launch(stubbed, dns="")
    stubbed.stub.add_response("describe_instances", {"Reservations": [{"Instances": [_instance(dns="")]}]})
    with pytest.raises(MachineError) as err:
        stubbed.create()
    assert err.value.code is Code.Internal and "no private DNS name" in err.value.message


def _with_prefixes(count: int) -> Any:
    eni = {
        "NetworkInterfaceId": "eni-1",
        "SourceDestCheck": True,
        "Attachment": {"DeviceIndex": 0, "NetworkCardIndex": 0},
        "Ipv6Prefixes": [{"Ipv6Prefix": f"2a05:d018::{i}/80"} for i in range(count)],
    }
    return {"Reservations": [{"Instances": [{**_instance(), "NetworkInterfaces": [eni]}]}]}


def test_ipv6_prefixes_assigned_by_ec2_make_the_machine_initialized() -> None:
    s = StubbedDriver()
    spec = provider_spec()
    spec["networkInterfaces"][0]["ipv6PrefixCount"] = 2
    machine, klass = make_machine("m-1"), make_machine_class(spec)
    s.stub.add_response("describe_instances", _with_prefixes(1))
    s.stub.add_response(
        "assign_ipv6_addresses",
        {"NetworkInterfaceId": "eni-1"},
        {"NetworkInterfaceId": "eni-1", "Ipv6PrefixCount": 1},
    )
    s.stub.add_response("describe_instances", _with_prefixes(2))
    with s.stub:
        s.driver.initialize_machine(
            InitializeMachineRequest(machine=machine, machine_class=klass, secret=make_secret())
        )
        status = s.driver.get_machine_status(
            GetMachineStatusRequest(machine=machine, machine_class=klass, secret=make_secret())
        )
    assert status.provider_id.endswith("/i-0123456789abcdef0")
    s.stub.assert_no_pending_responses()


def test_a_failing_prefix_assignment_is_uninitialized() -> None:
    s = StubbedDriver()
    spec = provider_spec()
    spec["networkInterfaces"][0]["ipv6PrefixCount"] = 1
    s.stub.add_response("describe_instances", _with_prefixes(0))
    s.stub.add_client_error("assign_ipv6_addresses", service_error_code="PrefixLimitExceeded")
    req = InitializeMachineRequest(
        machine=make_machine("m-1"), machine_class=make_machine_class(spec), secret=make_secret()
    )
    with s.stub, pytest.raises(MachineError) as err:
        s.driver.initialize_machine(req)
    assert err.value.code is Code.Uninitialized and "PrefixLimitExceeded" in err.value.message
