"""The AWS driver against a moto server on a free port: every driver method over real HTTP.

Where moto falls short of EC2 the test says so: it ignores ENI tag specifications and never
assigns IPv6 prefixes, and only honours AvailabilityZone and HostId of a placement. Those parts
are covered by the pure request-building tests and the Stubber tests.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY

from mcm_sandbox.procs import free_port
from providers.aws import AWSDriver
from providers.aws.ratelimit import RequestLimiter
from providers.aws.secret import credentials_from
from providers.driver import (
    CreateMachineRequest,
    DeleteMachineRequest,
    GetMachineStatusRequest,
    GetVolumeIDsRequest,
    InitializeMachineRequest,
    ListMachinesRequest,
    Secret,
)
from providers.errors import Code, MachineError
from tests.integration.moto_fixture import (
    ACCESS_KEY_ID,
    CLUSTER_TAG,
    REGION,
    ROLE_TAG,
    SECRET_ACCESS_KEY,
    USER_DATA,
    AwsWorld,
    make_machine,
    make_machine_class,
    make_secret,
    world_spec,
)

pytestmark = pytest.mark.integration

# the moto server (one per session) and a fresh AWS world per test


def _driver(world: AwsWorld, **options: Any) -> AWSDriver:
    return AWSDriver(endpoint_url=world.url, describe_timeout=10.0, **options)


def _create(driver: AWSDriver, world: AwsWorld, name: str, secret: Secret | None = None, **spec: Any) -> Any:
    machine = make_machine(name, placement=spec.pop("_placement", None))
    req = CreateMachineRequest(
        machine=machine,
        machine_class=make_machine_class(world_spec(world, **spec)),
        secret=secret or make_secret(),
    )
    return driver.create_machine(req)


def _instance(world: AwsWorld, provider_id: str) -> Any:
    instance_id = provider_id.rsplit("/", 1)[-1]
    return world.ec2().describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


def _tags(tag_list: list[dict[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tag_list or []}


def _req(cls: Any, world: AwsWorld, name: str, provider_id: str = "", **spec: Any) -> Any:
    return cls(
        machine=make_machine(name, provider_id),
        machine_class=make_machine_class(world_spec(world, **spec)),
        secret=make_secret(),
    )


def _metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# --- CreateMachine ----------------------------------------------------------------------------


def test_create_machine_launches_a_tagged_vm_and_answers_with_its_ids(aws_world: AwsWorld) -> None:
    driver = _driver(aws_world)
    runs = _metric("mcm_cloud_api_requests_total", provider="aws", service="RunInstances")
    creates = _metric(
        "mcm_cloud_api_driver_request_duration_seconds_count", provider="aws", operation="create_machine"
    )
    resp = _create(
        driver, aws_world, "shoot-worker-a-1", tags={CLUSTER_TAG: "1", ROLE_TAG: "1", "Name": "x", "t": "v"}
    )

    instance = _instance(aws_world, resp.provider_id)
    assert resp.provider_id == f"aws:///{REGION}/{instance['InstanceId']}"
    assert resp.node_name == instance["PrivateDnsName"] != ""
    assert ("InternalIP", instance["PrivateIpAddress"]) in [(a.type, a.address) for a in resp.addresses]
    assert instance["InstanceType"] == "m5.large" and instance["ImageId"] == aws_world.ami_xvda
    assert _tags(instance["Tags"]) == {CLUSTER_TAG: "1", ROLE_TAG: "1", "t": "v", "Name": "shoot-worker-a-1"}
    volumes = aws_world.ec2().describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [instance["InstanceId"]]}]
    )["Volumes"]
    assert len(volumes) == 2
    for volume in volumes:
        assert _tags(volume["Tags"])["Name"] == "shoot-worker-a-1"
    user_data = aws_world.ec2().describe_instance_attribute(
        InstanceId=instance["InstanceId"], Attribute="userData"
    )
    assert base64.b64decode(user_data["UserData"]["Value"]) == USER_DATA  # encoded exactly once
    assert _metric("mcm_cloud_api_requests_total", provider="aws", service="RunInstances") == runs + 1
    assert (
        _metric(
            "mcm_cloud_api_driver_request_duration_seconds_count", provider="aws", operation="create_machine"
        )
        == creates + 1
    )


@pytest.mark.parametrize(("ami_attr", "root"), [("ami_xvda", "/dev/xvda"), ("ami_sda1", "/dev/sda1")])
def test_block_devices_map_root_to_the_ami_root_device(aws_world: AwsWorld, ami_attr: str, root: str) -> None:
    resp = _create(_driver(aws_world), aws_world, "m-disk", ami=getattr(aws_world, ami_attr))
    instance = _instance(aws_world, resp.provider_id)
    assert instance["RootDeviceName"] == root
    assert sorted(m["DeviceName"] for m in instance["BlockDeviceMappings"]) == sorted([root, "/dev/sdf"])
    sizes = {
        v["Attachments"][0]["Device"]: (v["Size"], v["VolumeType"])
        for v in aws_world.ec2().describe_volumes()["Volumes"]
    }
    assert sizes == {root: (50, "gp3"), "/dev/sdf": (100, "gp2")}


@pytest.mark.parametrize(
    "market", [{"spotPrice": "0.25"}, {"spotPrice": ""}, {"instanceMarketOptions": {"marketType": "spot"}}]
)
def test_spot_instances(aws_world: AwsWorld, market: dict[str, Any]) -> None:
    resp = _create(_driver(aws_world), aws_world, "m-spot", **market)
    assert _instance(aws_world, resp.provider_id)["InstanceLifecycle"] == "spot"
    on_demand = _create(_driver(aws_world), aws_world, "m-on-demand")
    assert "InstanceLifecycle" not in _instance(aws_world, on_demand.provider_id)


def test_placement_from_the_spec_else_from_the_node_template_annotation(aws_world: AwsWorld) -> None:
    ec2 = aws_world.ec2()
    host_a, host_b = ec2.allocate_hosts(AvailabilityZone="eu-west-1b", InstanceType="m5.large", Quantity=2)[
        "HostIds"
    ]
    driver = _driver(aws_world)
    by_annotation = _create(driver, aws_world, "m-ann", _placement={"HostId": host_a, "Tenancy": "host"})
    assert _instance(aws_world, by_annotation.provider_id)["Placement"]["HostId"] == host_a
    by_spec = _create(
        driver,
        aws_world,
        "m-spec",
        _placement={"hostId": host_a},
        placement={"tenancy": "host", "hostId": host_b},
    )
    assert _instance(aws_world, by_spec.provider_id)["Placement"]["HostId"] == host_b
    with pytest.raises(MachineError) as err:
        _create(driver, aws_world, "m-bad", _placement="{not json")
    assert err.value.code is Code.Internal


def test_iam_by_arn_metadata_options_and_key_name(aws_world: AwsWorld) -> None:
    aws_world.ec2().create_key_pair(KeyName="ssh")
    resp = _create(
        _driver(aws_world),
        aws_world,
        "m-iam",
        iam={"arn": aws_world.profile_arn},
        keyName="ssh",
        instanceMetadataOptions={"httpTokens": "required", "httpPutResponseHopLimit": 2},
    )
    instance = _instance(aws_world, resp.provider_id)
    assert instance["KeyName"] == "ssh"
    assert (
        instance["MetadataOptions"]["HttpTokens"],
        instance["MetadataOptions"]["HttpPutResponseHopLimit"],
    ) == (
        "required",
        2,
    )
    associations = aws_world.ec2().describe_iam_instance_profile_associations()[
        "IamInstanceProfileAssociations"
    ]
    assert [a["IamInstanceProfile"]["Arn"] for a in associations] == [aws_world.profile_arn]


@pytest.mark.parametrize(
    ("case", "build", "code", "fragment"),
    [
        ("missing AMI", lambda w: {"spec": world_spec(w, ami="ami-12345678")}, Code.NotFound, "ami-12345678"),
        (
            "wrong provider",
            lambda w: {"spec": world_spec(w), "provider": "GCP"},
            Code.InvalidArgument,
            "'GCP'",
        ),
        (
            "undecodable",
            lambda w: {"spec": world_spec(w, tags=["a"])},
            Code.Internal,
            "cannot decode providerSpec",
        ),
        (
            "invalid spec",
            lambda w: {"spec": world_spec(w, machineType="", tags={})},
            Code.InvalidArgument,
            "machineType",
        ),
        (
            "no disks",
            lambda w: {"spec": world_spec(w, blockDevices=[])},
            Code.InvalidArgument,
            "blockDevices",
        ),
        (
            "no userData",
            lambda w: {"spec": world_spec(w), "secret": make_secret(userData=None)},
            Code.InvalidArgument,
            "userData",
        ),
        (
            "no keys",
            lambda w: {"spec": world_spec(w), "secret": make_secret(providerAccessKeyId=None)},
            Code.InvalidArgument,
            "accessKeyID",
        ),
    ],
)
def test_create_machine_failures(
    aws_world: AwsWorld, case: str, build: Any, code: Code, fragment: str
) -> None:
    args = build(aws_world)
    req = CreateMachineRequest(
        machine=make_machine("m-fail"),
        machine_class=make_machine_class(args["spec"], provider=args.get("provider", "AWS")),
        secret=args.get("secret", make_secret()),
    )

    def counts() -> tuple[float, float]:
        labels = {"provider": "aws", "operation": "create_machine", "error_code": code.name}
        failed_calls = _metric(
            "mcm_cloud_api_requests_failed_total", provider="aws", service="DescribeImages"
        )
        return _metric("mcm_cloud_api_driver_requests_failed_total", **labels), failed_calls

    before = counts()
    with pytest.raises(MachineError) as err:
        _driver(aws_world).create_machine(req)
    assert err.value.code is code and fragment in err.value.message
    assert aws_world.ec2().describe_instances()["Reservations"] == []
    after = counts()
    assert after[0] == before[0] + 1
    assert after[1] == before[1] + (1 if case == "missing AMI" else 0)


def test_web_identity_credentials_through_sts(aws_world: AwsWorld, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJSUzI1NiJ9.projected-token.sig")
    secret = make_secret(
        providerAccessKeyId=None,
        providerSecretAccessKey=None,
        workloadIdentityTokenFile=str(token).encode(),
        roleARN=b"arn:aws:iam::123456789012:role/machine-controller",
    )
    driver = _driver(aws_world)
    resp = _create(driver, aws_world, "m-wi", secret=secret)
    listed = driver.list_machines(
        ListMachinesRequest(machine_class=make_machine_class(world_spec(aws_world)), secret=secret)
    )
    assert listed.machine_list == {resp.provider_id: "m-wi"}
    assert driver.clients.get(REGION, _creds(secret)).account() == "123456789012"


def _creds(secret: Secret) -> Any:
    return credentials_from(secret)


def test_no_secret_reaches_logs_or_errors(aws_world: AwsWorld, caplog: pytest.LogCaptureFixture) -> None:
    secrets = [
        SECRET_ACCESS_KEY,
        USER_DATA.decode(),
        base64.b64encode(USER_DATA).decode(),
        "bootstrap-token-s3cr3t",
    ]
    messages: list[str] = []
    with caplog.at_level(logging.DEBUG):
        driver = _driver(aws_world)
        resp = _create(driver, aws_world, "m-secret")
        for spec in (world_spec(aws_world, ami="ami-12345678"), world_spec(aws_world, region="")):
            with pytest.raises(MachineError) as err:
                driver.create_machine(
                    CreateMachineRequest(
                        machine=make_machine("m-x"),
                        machine_class=make_machine_class(spec),
                        secret=make_secret(),
                    )
                )
            messages += [str(err.value), repr(err.value)]
        driver.delete_machine(_req(DeleteMachineRequest, aws_world, "m-secret", resp.provider_id))
    assert "RunInstances" in caplog.text or "ec2" in caplog.text.lower()  # the SDK did log at DEBUG
    for value in secrets:
        assert value not in caplog.text
        assert all(value not in m for m in messages)
    assert ACCESS_KEY_ID not in repr(driver.clients._clients)


# --- InitializeMachine and GetMachineStatus ---------------------------------------------------


def test_initialize_disables_source_dest_check_per_eni(aws_world: AwsWorld) -> None:
    driver = _driver(aws_world)
    resp = _create(driver, aws_world, "m-nat", srcAndDstChecksEnabled=False)
    status_req = _req(
        GetMachineStatusRequest, aws_world, "m-nat", resp.provider_id, srcAndDstChecksEnabled=False
    )
    with pytest.raises(MachineError) as err:
        driver.get_machine_status(status_req)
    assert err.value.code is Code.Uninitialized and "SourceDestCheck" in err.value.message

    init = driver.initialize_machine(
        _req(InitializeMachineRequest, aws_world, "m-nat", resp.provider_id, srcAndDstChecksEnabled=False)
    )
    assert (init.provider_id, init.node_name) == (resp.provider_id, resp.node_name)
    enis = _instance(aws_world, resp.provider_id)["NetworkInterfaces"]
    assert [e["SourceDestCheck"] for e in enis] == [False]
    status = driver.get_machine_status(status_req)
    assert (status.provider_id, status.node_name) == (resp.provider_id, resp.node_name)


def test_initialize_assigns_missing_ipv6_prefixes(aws_world: AwsWorld) -> None:
    driver = _driver(aws_world)
    nics = [
        {
            "subnetID": aws_world.subnet_id,
            "securityGroupIDs": [aws_world.security_group_id],
            "ipv6PrefixCount": 2,
        }
    ]
    resp = _create(driver, aws_world, "m-v6", networkInterfaces=nics)
    eni = _instance(aws_world, resp.provider_id)["NetworkInterfaces"][0]["NetworkInterfaceId"]
    sent: list[dict[str, Any]] = []
    client = driver.clients.get(REGION, _creds(make_secret()))
    client.ec2.meta.events.register(
        "provide-client-params.ec2.AssignIpv6Addresses", lambda params, **_: sent.append(dict(params))
    )
    driver.initialize_machine(
        _req(InitializeMachineRequest, aws_world, "m-v6", resp.provider_id, networkInterfaces=nics)
    )
    assert sent == [{"NetworkInterfaceId": eni, "Ipv6PrefixCount": 2}]
    # moto accepts the call but assigns no prefix, so the machine still reads as uninitialized
    with pytest.raises(MachineError) as err:
        driver.get_machine_status(
            _req(GetMachineStatusRequest, aws_world, "m-v6", resp.provider_id, networkInterfaces=nics)
        )
    assert err.value.code is Code.Uninitialized and "IPv6 prefix" in err.value.message


def test_initialize_without_a_vm_is_uninitialized(aws_world: AwsWorld) -> None:
    with pytest.raises(MachineError) as err:
        _driver(aws_world).initialize_machine(_req(InitializeMachineRequest, aws_world, "m-none"))
    assert err.value.code is Code.Uninitialized


def _run_tagged(world: AwsWorld, name: str | None, count: int = 1, cluster: str = CLUSTER_TAG) -> list[str]:
    tags = [{"Key": cluster, "Value": "1"}, {"Key": ROLE_TAG, "Value": "1"}]
    if name is not None:
        tags.append({"Key": "Name", "Value": name})
    out = world.ec2().run_instances(
        ImageId=world.ami_xvda,
        MinCount=count,
        MaxCount=count,
        SubnetId=world.subnet_id,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return [i["InstanceId"] for i in out["Instances"]]


def test_get_machine_status_by_tags_by_provider_id_and_for_duplicates(aws_world: AwsWorld) -> None:
    driver = _driver(aws_world)
    resp = _create(driver, aws_world, "m-get")
    by_tags = driver.get_machine_status(_req(GetMachineStatusRequest, aws_world, "m-get"))
    assert (by_tags.provider_id, by_tags.node_name) == (resp.provider_id, resp.node_name)

    (untagged,) = _run_tagged(aws_world, None)
    pid = f"aws:///{REGION}/{untagged}"
    assert (
        driver.get_machine_status(_req(GetMachineStatusRequest, aws_world, "m-untagged", pid)).provider_id
        == pid
    )

    _run_tagged(aws_world, "m-twice", count=2)
    with pytest.raises(MachineError) as err:
        driver.get_machine_status(_req(GetMachineStatusRequest, aws_world, "m-twice"))
    assert err.value.code is Code.OutOfRange

    aws_world.ec2().terminate_instances(InstanceIds=[untagged])
    for req in (
        _req(GetMachineStatusRequest, aws_world, "m-untagged", pid),
        _req(GetMachineStatusRequest, aws_world, "m-untagged", f"aws:///{REGION}/i-0123456789abcdef0"),
        _req(GetMachineStatusRequest, aws_world, "m-nowhere"),
    ):
        with pytest.raises(MachineError) as err:
            driver.get_machine_status(req)
        assert err.value.code is Code.NotFound


# --- DeleteMachine ----------------------------------------------------------------------------


def _state(world: AwsWorld, instance_id: str) -> str:
    return str(_instance(world, f"x/{instance_id}")["State"]["Name"])


def test_delete_by_provider_id_and_again_and_unknown(aws_world: AwsWorld) -> None:
    driver = _driver(aws_world)
    resp = _create(driver, aws_world, "m-del")
    instance_id = resp.provider_id.rsplit("/", 1)[-1]
    driver.delete_machine(_req(DeleteMachineRequest, aws_world, "m-del", resp.provider_id))
    assert _state(aws_world, instance_id) in ("shutting-down", "terminated")
    driver.delete_machine(_req(DeleteMachineRequest, aws_world, "m-del", resp.provider_id))
    driver.delete_machine(
        _req(DeleteMachineRequest, aws_world, "m-x", f"aws:///{REGION}/i-0123456789abcdef0")
    )
    with pytest.raises(MachineError) as err:
        driver.delete_machine(_req(DeleteMachineRequest, aws_world, "m-x", "no-slashes"))
    assert err.value.code is Code.InvalidArgument


def test_delete_without_provider_id_terminates_every_vm_found_by_tags(aws_world: AwsWorld) -> None:
    twins = _run_tagged(aws_world, "m-lost", count=2)
    (other,) = _run_tagged(aws_world, "m-other")
    driver = _driver(aws_world)
    driver.delete_machine(_req(DeleteMachineRequest, aws_world, "m-lost"))
    assert {_state(aws_world, i) for i in twins} <= {"shutting-down", "terminated"}
    assert _state(aws_world, other) == "running"
    driver.delete_machine(_req(DeleteMachineRequest, aws_world, "m-never-created"))


# --- ListMachines -----------------------------------------------------------------------------


def test_list_machines_pages_through_live_vms_of_the_class(aws_world: AwsWorld) -> None:
    names = [f"m-{i:02d}" for i in range(12)]
    ids = [_run_tagged(aws_world, name)[0] for name in names]
    _run_tagged(aws_world, "m-foreign", cluster="kubernetes.io/cluster/other")
    aws_world.ec2().run_instances(
        ImageId=aws_world.ami_xvda, MinCount=1, MaxCount=1, SubnetId=aws_world.subnet_id
    )
    aws_world.ec2().terminate_instances(InstanceIds=[ids[0]])

    driver = _driver(aws_world, page_size=5)
    calls: list[str] = []
    client = driver.clients.get(REGION, _creds(make_secret()))
    client.ec2.meta.events.register("before-call.ec2.DescribeInstances", lambda **_: calls.append("page"))
    listed = driver.list_machines(
        ListMachinesRequest(machine_class=make_machine_class(world_spec(aws_world)), secret=make_secret())
    )
    assert listed.machine_list == {f"aws:///{REGION}/{i}": n for i, n in zip(ids[1:], names[1:], strict=True)}
    assert len(calls) >= 3  # 11 matching VMs at 5 per page


# --- GetVolumeIDs -----------------------------------------------------------------------------


def test_get_volume_ids_for_a_machines_volumes(aws_world: AwsWorld) -> None:
    driver = _driver(aws_world)
    resp = _create(driver, aws_world, "m-vol")
    vols = [m["Ebs"]["VolumeId"] for m in _instance(aws_world, resp.provider_id)["BlockDeviceMappings"]]
    specs = [
        {"awsElasticBlockStore": {"volumeID": f"aws://{REGION}b/{vols[0]}"}},
        {"awsElasticBlockStore": {"volumeID": f"aws:///{vols[1]}"}},
        {"awsElasticBlockStore": {"volumeID": vols[0]}},
        {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": vols[1]}},
        {"csi": {"driver": "efs.csi.aws.com", "volumeHandle": "fs-1"}},
    ]
    assert driver.get_volume_ids(GetVolumeIDsRequest(pv_specs=specs)).volume_ids == [
        vols[0],
        vols[1],
        vols[0],
        vols[1],
    ]


# --- the shared request budget ----------------------------------------------------------------


def test_request_budget_is_shared_per_account_and_region_through_redis(
    aws_world: AwsWorld, redis_url: str, redis_client: redis.Redis
) -> None:
    options: dict[str, Any] = {
        "redis_url": redis_url,
        "rate_limit_qps": 0.001,
        "rate_limit_burst": 3,
        "rate_limit_max_wait": 0.0,
    }
    first, second = _driver(aws_world, **options), _driver(aws_world, **options)  # as two processes would
    list_req = ListMachinesRequest(
        machine_class=make_machine_class(world_spec(aws_world)), secret=make_secret()
    )
    first.list_machines(list_req)
    first.list_machines(list_req)
    second.list_machines(list_req)
    for driver in (second, first):
        with pytest.raises(MachineError) as err:
            driver.list_machines(list_req)
        assert err.value.code is Code.Unavailable and "request limit" in err.value.message
    assert [k for k in redis_client.keys("*ratelimit*") if "123456789012" in k and REGION in k]
    unlimited = _driver(aws_world)
    for _ in range(5):
        unlimited.list_machines(list_req)


def test_a_short_wait_for_the_budget_is_slept_off(redis_client: redis.Redis) -> None:
    slept: list[float] = []
    limiter = RequestLimiter(
        redis_client, "test:ratelimit:aws", qps=10.0, burst=1, max_wait=1.0, sleep=slept.append
    )
    limiter.acquire("123456789012", REGION)
    limiter.acquire("123456789012", REGION)
    assert len(slept) == 1 and 0 < slept[0] <= 0.1
    limiter.acquire("210987654321", REGION)  # another account has its own budget
    assert len(slept) == 1


def test_without_redis_the_budget_is_not_enforced(aws_world: AwsWorld) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    driver = _driver(
        aws_world, redis_url=dead, rate_limit_qps=0.001, rate_limit_burst=1, rate_limit_max_wait=0.0
    )
    list_req = ListMachinesRequest(
        machine_class=make_machine_class(world_spec(aws_world)), secret=make_secret()
    )
    for _ in range(3):
        driver.list_machines(list_req)
