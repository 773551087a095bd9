"""Error mapping, secret scrubbing, GetVolumeIDs forms and the provider's registration."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from providers import get_driver
from providers.aws import AWSDriver, errors
from providers.aws.secret import sensitive_values
from providers.aws.volumes import ebs_volume_id, volume_ids
from providers.driver import (
    CreateMachineRequest,
    DeleteMachineRequest,
    Driver,
    GetMachineStatusRequest,
    GetVolumeIDsRequest,
    InitializeMachineRequest,
    ListMachinesRequest,
)
from providers.errors import Code, MachineError
from tests.integration.moto_fixture import (
    SECRET_ACCESS_KEY,
    USER_DATA,
    make_machine,
    make_machine_class,
    make_secret,
    provider_spec,
)


def _client_error(code: str, message: str = "boom", op: str = "RunInstances") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, op)


def test_get_driver_loads_the_aws_entry_point() -> None:
    driver = get_driver("AWS")
    assert isinstance(driver, AWSDriver) and isinstance(driver, Driver)
    assert get_driver("AWS") is driver  # one per process: the client cache is shared


@pytest.mark.parametrize("code", sorted(errors.RESOURCE_EXHAUSTED))
def test_capacity_and_quota_errors_are_resource_exhausted(code: str) -> None:
    assert errors.code_for_create(_client_error(code)) is Code.ResourceExhausted


@pytest.mark.parametrize(
    "code", ["InvalidParameterValue", "UnauthorizedOperation", "RequestLimitExceeded", ""]
)
def test_other_create_errors_are_internal(code: str) -> None:
    assert errors.code_for_create(_client_error(code)) is Code.Internal
    assert errors.code_for_create(EndpointConnectionError(endpoint_url="http://x")) is Code.Internal


def test_not_found_cases() -> None:
    assert errors.code_for_terminate(_client_error("InvalidInstanceID.NotFound")) is Code.NotFound
    assert errors.code_for_terminate(_client_error("InvalidInstanceID.Malformed")) is Code.Internal
    assert errors.code_for_image_lookup(_client_error("InvalidAMIID.NotFound")) is Code.NotFound
    assert (
        errors.code_for_image_lookup(_client_error("InsufficientInstanceCapacity")) is Code.ResourceExhausted
    )
    assert errors.is_instance_not_found(_client_error("InvalidInstanceID.NotFound"))


def test_a_machine_error_keeps_its_code_through_the_mapping() -> None:
    own = MachineError(Code.Unavailable, "throttled")
    assert errors.code_for_create(own) is Code.Unavailable
    assert errors.to_machine_error(Code.Internal, "ctx", own, ()) is own


def test_messages_are_scrubbed_of_secret_values() -> None:
    secret = make_secret()
    leaky = _client_error("InvalidUserData.Malformed", f"bad {USER_DATA.decode()} / {SECRET_ACCESS_KEY}")
    err = errors.to_machine_error(Code.Internal, "RunInstances", leaky, sensitive_values(secret))
    assert err.code is Code.Internal and "InvalidUserData.Malformed" in err.message
    for text in (str(err), repr(err), err.message):
        assert SECRET_ACCESS_KEY not in text and "bootstrap-token-s3cr3t-value" not in text


@pytest.mark.parametrize(
    ("given", "expected"),
    [("aws://eu-west-1a/vol-0abc", "vol-0abc"), ("aws:///vol-0abc", "vol-0abc"), ("vol-0abc", "vol-0abc")],
)
def test_in_tree_volume_id_forms(given: str, expected: str) -> None:
    assert ebs_volume_id(given) == expected


@pytest.mark.parametrize("bad", ["gce://x/vol-1", "aws://zone/disk-1", "aws:///vol-1/extra", "", "volume-1"])
def test_malformed_in_tree_ids_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError):
        ebs_volume_id(bad)


def test_get_volume_ids_keeps_ebs_volumes_and_skips_the_rest() -> None:
    specs: list[Any] = [
        {"awsElasticBlockStore": {"volumeID": "aws://eu-west-1a/vol-1"}},
        {"awsElasticBlockStore": {"volumeID": "aws:///vol-2"}},
        {"awsElasticBlockStore": {"volumeID": "vol-3"}},
        {"awsElasticBlockStore": {"volumeID": "not-a-volume"}},
        {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-4"}},
        {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": ""}},
        {"csi": {"driver": "pd.csi.storage.gke.io", "volumeHandle": "projects/p/disks/d"}},
        {"nfs": {"server": "x", "path": "/"}},
        {},
        None,
    ]
    assert volume_ids(specs) == ["vol-1", "vol-2", "vol-3", "vol-4"]
    driver = AWSDriver(endpoint_url="http://127.0.0.1:9")  # no call leaves the process
    assert driver.get_volume_ids(GetVolumeIDsRequest(pv_specs=specs[:5])).volume_ids == [
        "vol-1",
        "vol-2",
        "vol-3",
        "vol-4",
    ]


PRECHECK_CASES = [
    ("other provider", {"provider": "Azure"}, {}, Code.InvalidArgument),
    ("no provider", {"provider": ""}, {}, Code.InvalidArgument),
    ("undecodable", {"spec": {**provider_spec(), "blockDevices": "not-a-list"}}, {}, Code.Internal),
    ("invalid spec", {"spec": {**provider_spec(), "region": ""}}, {}, Code.InvalidArgument),
    ("invalid secret", {}, {"userData": None}, Code.InvalidArgument),
]
METHODS = ["create_machine", "initialize_machine", "delete_machine", "get_machine_status", "list_machines"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    ("case", "klass", "secret", "code"), PRECHECK_CASES, ids=[c[0] for c in PRECHECK_CASES]
)
def test_machine_methods_check_provider_decoding_and_rules_before_any_call(
    method: str, case: str, klass: dict[str, Any], secret: dict[str, Any], code: Code
) -> None:
    driver = AWSDriver(endpoint_url="http://127.0.0.1:9")  # nothing listens there: a call would fail
    machine_class = make_machine_class(
        klass.get("spec", provider_spec()), provider=klass.get("provider", "AWS")
    )
    fields = {"machine_class": machine_class, "secret": make_secret(**secret)}
    request_type = {
        "create_machine": CreateMachineRequest,
        "initialize_machine": InitializeMachineRequest,
        "delete_machine": DeleteMachineRequest,
        "get_machine_status": GetMachineStatusRequest,
    }.get(method)
    req: Any = (
        request_type(machine=make_machine("m"), **fields) if request_type else ListMachinesRequest(**fields)
    )
    with pytest.raises(MachineError) as err:
        getattr(driver, method)(req)
    assert err.value.code is code
