"""The local Driver against a real Redis: every method, shared state across driver instances."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY

from mcm_tasks.api import Machine, MachineClass
from providers import get_driver
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
from providers.local import LocalDriver, VMState
from providers.local.cloud import Follower

pytestmark = pytest.mark.integration

USER_DATA = b"#!/bin/sh\necho the-secret-bootstrap-token\n"
SECRET = Secret(data={"userData": USER_DATA})


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make_class(name: str = "small", **spec: Any) -> MachineClass:
    return MachineClass.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "provider": "local",
            "providerSpec": spec,
            "nodeTemplate": {
                "capacity": {"cpu": "4", "memory": "8Gi"},
                "instanceType": "local.large",
                "region": "sandbox",
                "zone": "local-b",
            },
        }
    )


def make_machine(name: str, provider_id: str = "", namespace: str = "default") -> Machine:
    doc: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"class": {"name": "x"}},
    }
    if provider_id:
        doc["spec"]["providerID"] = provider_id
    return Machine.model_validate(doc)


def create(driver: LocalDriver, name: str, cls: MachineClass, secret: Secret = SECRET) -> str:
    return driver.create_machine(
        CreateMachineRequest(machine=make_machine(name), machine_class=cls, secret=secret)
    ).provider_id


def status(driver: LocalDriver, name: str, cls: MachineClass, provider_id: str = "") -> str:
    req = GetMachineStatusRequest(machine=make_machine(name, provider_id), machine_class=cls, secret=SECRET)
    return driver.get_machine_status(req).provider_id


def delete(driver: LocalDriver, name: str, cls: MachineClass, provider_id: str = "") -> str:
    req = DeleteMachineRequest(machine=make_machine(name, provider_id), machine_class=cls, secret=SECRET)
    return driver.delete_machine(req).last_known_state


def listed(driver: LocalDriver, cls: MachineClass) -> dict[str, str]:
    return driver.list_machines(ListMachinesRequest(machine_class=cls, secret=SECRET)).machine_list


@pytest.fixture()
def clock() -> Clock:
    return Clock()


@pytest.fixture()
def driver(redis_url: str, clock: Clock) -> LocalDriver:
    return LocalDriver(redis_url, clock=clock)


def test_registered_under_local() -> None:
    assert isinstance(get_driver("local"), LocalDriver)


def test_create_then_status_and_addresses(driver: LocalDriver) -> None:
    cls = make_class()
    resp = driver.create_machine(
        CreateMachineRequest(machine=make_machine("m1"), machine_class=cls, secret=SECRET)
    )
    assert resp.provider_id.startswith("local:///local-b/i-")
    assert resp.node_name == "m1"
    assert {a.type for a in resp.addresses} == {"InternalIP", "Hostname"}
    got = driver.get_machine_status(
        GetMachineStatusRequest(machine=make_machine("m1"), machine_class=cls, secret=SECRET)
    )
    assert (got.provider_id, got.node_name) == (resp.provider_id, "m1")
    [vm] = driver.cloud.all()
    assert (vm.instance_type, vm.region, vm.capacity["memory"]) == ("local.large", "sandbox", "8Gi")
    assert vm.machine_class == "default/small"


def test_node_name_can_be_fixed_by_the_class(driver: LocalDriver) -> None:
    resp = driver.create_machine(
        CreateMachineRequest(
            machine=make_machine("m1"), machine_class=make_class(nodeName="old-node"), secret=SECRET
        )
    )
    assert resp.node_name == "old-node"
    assert driver.cloud.all()[0].node_name == "old-node"


def test_user_data_is_never_stored(driver: LocalDriver, redis_client: redis.Redis) -> None:
    create(driver, "m1", make_class())
    stored: list[Any] = []
    for key in redis_client.keys("*"):
        kind = str(redis_client.type(key))
        read = {"hash": redis_client.hgetall, "set": redis_client.smembers, "string": redis_client.get,
                "stream": redis_client.xrange}[kind]  # fmt: skip
        stored.append(read(key))
    assert stored and "the-secret-bootstrap-token" not in repr(stored)
    [vm] = driver.cloud.all()
    assert vm.user_data_len == len(USER_DATA) and len(vm.user_data_sha256) == 64


def test_create_is_idempotent_per_machine_name(redis_url: str, driver: LocalDriver) -> None:
    cls = make_class()
    first = create(driver, "m1", cls)
    assert create(LocalDriver(redis_url), "m1", cls) == first
    assert len(driver.cloud.all()) == 1


def test_concurrent_creates_make_one_vm(redis_url: str) -> None:
    cls = make_class()
    ids: list[str] = []
    barrier = threading.Barrier(6)

    def run() -> None:
        d = LocalDriver(redis_url)
        barrier.wait()
        ids.append(create(d, "racy", cls))

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(set(ids)) == 1 and len(ids) == 6
    assert len(LocalDriver(redis_url).cloud.all()) == 1


def test_fail_creates_budget_is_shared_by_driver_instances(redis_url: str) -> None:
    cls = make_class(failCreates={"count": 2, "code": "ResourceExhausted"})
    one, two = LocalDriver(redis_url), LocalDriver(redis_url)
    for d in (one, two):
        with pytest.raises(MachineError) as info:
            create(d, "m1", cls)
        assert info.value.code is Code.ResourceExhausted
    assert one.cloud.all() == []
    assert create(one, "m1", cls).startswith("local:///")
    assert create(two, "m2", cls).startswith("local:///")


def test_failed_driver_calls_are_counted(driver: LocalDriver) -> None:
    labels = {
        "provider": "local",
        "operation": "create_machine",
        "error_code": Code.InvalidArgument.name,
    }
    before = REGISTRY.get_sample_value("mcm_cloud_api_driver_requests_failed_total", labels) or 0.0
    with pytest.raises(MachineError):
        create(driver, "m1", make_class(bootDelaySeconds="later"))
    assert REGISTRY.get_sample_value("mcm_cloud_api_driver_requests_failed_total", labels) == before + 1


def test_invalid_class_or_secret_creates_nothing(driver: LocalDriver) -> None:
    with pytest.raises(MachineError) as info:
        create(driver, "m1", make_class(neverJoin="no"), Secret())
    assert info.value.code is Code.InvalidArgument
    assert "neverJoin" in info.value.message and "userData" in info.value.message
    assert driver.cloud.all() == []


def test_status_not_found_and_out_of_range(driver: LocalDriver) -> None:
    cls = make_class()
    with pytest.raises(MachineError) as info:
        status(driver, "nope", cls)
    assert info.value.code is Code.NotFound
    create(driver, "twin", cls)
    [vm] = driver.cloud.all()
    driver.cloud.insert(vm.model_copy(update={"id": "i-dup", "provider_id": "local:///local-b/i-dup"}))
    with pytest.raises(MachineError) as info:
        status(driver, "twin", cls)
    assert info.value.code is Code.OutOfRange


def test_status_falls_back_to_the_provider_id(driver: LocalDriver) -> None:
    cls = make_class()
    pid = create(driver, "m1", cls)
    assert status(driver, "renamed", cls, provider_id=pid) == pid


def test_delete_by_provider_id_by_name_and_absent_is_ok(driver: LocalDriver) -> None:
    cls = make_class()
    pid1 = create(driver, "m1", cls)
    create(driver, "m2", cls)
    assert "deleted" in delete(driver, "other-name", cls, provider_id=pid1)
    assert [vm.machine for vm in driver.cloud.all()] == ["m2"]
    delete(driver, "m2", cls)
    assert driver.cloud.all() == []
    assert "already deleted" in delete(driver, "m2", cls)
    assert "already deleted" in delete(driver, "m1", cls, provider_id=pid1)


def test_delete_delay_keeps_the_vm_terminating(driver: LocalDriver, clock: Clock) -> None:
    cls = make_class(deleteDelaySeconds=30)
    pid = create(driver, "m1", cls)
    delete(driver, "m1", cls, provider_id=pid)
    [vm] = driver.cloud.all()
    assert vm.state(clock.now) is VMState.TERMINATING
    with pytest.raises(MachineError) as info:
        status(driver, "m1", cls)
    assert info.value.code is Code.NotFound
    assert listed(driver, cls) == {}
    clock.now += 10
    delete(driver, "m1", cls, provider_id=pid)  # a second delete does not restart the clock
    fresh = create(driver, "m1", cls)
    assert fresh != pid
    clock.now += 20
    assert [v.provider_id for v in driver.cloud.all()] == [fresh]
    assert driver.cloud.by_machine("m1")[0].provider_id == fresh


def test_same_machine_name_in_two_namespaces_gets_two_vms(driver: LocalDriver) -> None:
    """In a seed, two shoot namespaces may each have a machine ``m1``: each is its own VM, and
    deleting one (by name, with no providerID yet) leaves the other."""
    cls = make_class()

    def request(namespace: str) -> CreateMachineRequest:
        machine = make_machine("m1", namespace=namespace)
        return CreateMachineRequest(machine=machine, machine_class=cls, secret=SECRET)

    a = driver.create_machine(request("shoot-a")).provider_id
    b = driver.create_machine(request("shoot-b")).provider_id
    assert a != b
    assert driver.create_machine(request("shoot-a")).provider_id == a  # still idempotent per namespace
    gone = make_machine("m1", namespace="shoot-a")
    driver.delete_machine(DeleteMachineRequest(machine=gone, machine_class=cls, secret=SECRET))
    assert [vm.provider_id for vm in driver.cloud.by_machine("m1", "shoot-b") if vm.live()] == [b]
    assert [vm for vm in driver.cloud.by_machine("m1", "shoot-a") if vm.live()] == []


def test_boot_delay_makes_the_vm_pending_first(driver: LocalDriver, clock: Clock) -> None:
    create(driver, "m1", make_class(bootDelaySeconds=5))
    [vm] = driver.cloud.all()
    assert vm.state(clock.now) is VMState.PENDING
    assert vm.state(clock.now + 5) is VMState.RUNNING


def test_create_delay_holds_a_new_vms_create_call_only(driver: LocalDriver) -> None:
    """``createDelaySeconds``: the call that launches a VM answers that long after it is made (as a
    cloud's does); asking again for a machine that has its VM answers at once."""
    cls = make_class(createDelaySeconds=0.3)
    started = time.monotonic()
    first = create(driver, "m1", cls)
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    assert create(driver, "m1", cls) == first
    assert time.monotonic() - started < 0.3


def test_list_machines_by_class(driver: LocalDriver) -> None:
    small, large = make_class("small"), make_class("large")
    a = create(driver, "a", small)
    b = create(driver, "b", small)
    c = create(driver, "c", large)
    assert listed(driver, small) == {a: "a", b: "b"}
    assert listed(driver, large) == {c: "c"}


def test_initialize_is_unimplemented(driver: LocalDriver) -> None:
    req = InitializeMachineRequest(machine=make_machine("m1"), machine_class=make_class(), secret=SECRET)
    with pytest.raises(MachineError) as info:
        driver.initialize_machine(req)
    assert info.value.code is Code.Unimplemented


def test_volume_ids_of_the_local_csi_driver(driver: LocalDriver) -> None:
    specs = [
        {"csi": {"driver": "local.csi.mcm-tasks.io", "volumeHandle": "v-1"}},
        {"csi": {"driver": "other", "volumeHandle": "v-2"}},
    ]
    assert driver.get_volume_ids(GetVolumeIDsRequest(pv_specs=specs)).volume_ids == ["v-1"]


def test_the_cloud_may_live_in_a_redis_of_its_own(redis_url: str) -> None:
    """``local_cloud_redis_url`` (the benchmarks' sandbox: the cloud is no load on our Redis)."""
    from mcm_tasks.redisdb import get_redis
    from mcm_tasks.settings import configure, reset_settings
    from providers.local import LocalCloud

    cloud_url = redis_url.rsplit("/", 1)[0] + "/3"
    configure({"redis_url": redis_url, "local_cloud_redis_url": cloud_url})
    try:
        provider_id = create(LocalDriver(), "own-redis", make_class())
        assert [vm.provider_id for vm in LocalCloud(get_redis(cloud_url)).by_machine("own-redis")] == [
            provider_id
        ]
        assert LocalCloud(get_redis(redis_url)).by_machine("own-redis") == []
    finally:
        reset_settings()


def test_a_readers_memo_parses_only_changed_vms(driver: LocalDriver) -> None:
    """The kubelet simulator reads every VM twice a second: with its memo an unchanged VM is the
    object parsed before, a changed one is parsed again, and a forgotten one leaves the memo."""
    cls = make_class()
    create(driver, "m-a", cls)
    create(driver, "m-b", cls)
    cloud = driver.cloud
    memo: dict[str, Any] = {}
    first = {vm.machine: vm for vm in cloud.all(memo)}
    again = {vm.machine: vm for vm in cloud.all(memo)}
    assert again["m-a"] is first["m-a"] and again["m-b"] is first["m-b"]
    cloud.mark_registered(first["m-a"].id, 123.0)
    third = {vm.machine: vm for vm in cloud.all(memo)}
    assert third["m-a"] is not first["m-a"] and third["m-a"].registered_at == 123.0
    assert third["m-b"] is first["m-b"]
    cloud.r.delete(cloud.vm_key(first["m-b"].id))  # gone from the store: forgotten on the next read
    assert [vm.machine for vm in cloud.all(memo)] == ["m-a"]
    assert set(memo) == {first["m-a"].id}
    assert [vm.machine for vm in cloud.all()] == ["m-a"]  # and without a memo, as before


def test_a_follower_rereads_only_what_was_written(driver: LocalDriver) -> None:
    """``follow`` keeps every VM current through the change feed: a VM nobody wrote since the last
    read is the object read before, a written one is read again, a created one appears and a deleted
    one goes; what the clock alone changes waits for the next full read."""
    cls = make_class()
    create(driver, "m-a", cls)
    create(driver, "m-b", cls)
    cloud = driver.cloud
    follower = Follower(full_every=3600.0)
    first = {vm.machine: vm for vm in cloud.follow(follower)}
    cloud.mark_registered(first["m-a"].id, 42.0)
    create(driver, "m-c", cls)
    second = {vm.machine: vm for vm in cloud.follow(follower)}
    assert second["m-b"] is first["m-b"]  # not read again
    assert second["m-a"].registered_at == 42.0 and "m-c" in second
    cloud.terminate(first["m-b"].id)  # no delete delay: gone at once
    assert sorted(vm.machine for vm in cloud.follow(follower)) == ["m-a", "m-c"]
    assert [vm.machine for vm in cloud.follow(follower)] == [vm.machine for vm in cloud.all()]


def test_a_follower_reads_everything_again_in_time(driver: LocalDriver, redis_client: redis.Redis) -> None:
    """A write the feed lost (here: the stream deleted) shows at the next full read, ``full_every``
    after the last one."""
    cls = make_class()
    create(driver, "m-a", cls)
    cloud = driver.cloud
    follower = Follower(full_every=3600.0)
    [vm] = cloud.follow(follower)
    redis_client.hset(cloud.vm_key(vm.id), "registered_at", "7.0")  # behind the feed's back
    assert cloud.follow(follower)[0].registered_at is None
    follower.full_every = 0.0
    assert cloud.follow(follower)[0].registered_at == 7.0
