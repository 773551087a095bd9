"""The kubelet simulator against the sandbox API server (pod grace mode ``kubelet``) and a real
Redis, with VMs made through the local Driver."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from mcm_sandbox.cloud_cli import cloud_app
from mcm_sandbox.kubelet.simulator import KubeletSimulator
from mcm_sandbox.kubelet.watch import WatchedLists
from mcm_sandbox.procs import ApiServer, ManagedProcess, wait_until
from mcm_tasks.api import Machine, MachineClass
from mcm_tasks.redisdb import get_redis
from providers.driver import CreateMachineRequest, DeleteMachineRequest, Secret
from providers.local import CSI_DRIVER, LocalCloud, LocalDriver, VMState

pytestmark = pytest.mark.integration

MERGE = "application/merge-patch+json"
SECRET = Secret(data={"userData": b"#!/bin/sh\n"})
WAIT = 15.0


@pytest.fixture()
def core(api: ApiClient) -> Any:
    return client.CoreV1Api(api)


@pytest.fixture()
def driver(redis_url: str) -> LocalDriver:
    return LocalDriver(redis_url)


@pytest.fixture(params=["lists", "watches"])
def kubelet(api: ApiClient, redis_url: str, request: pytest.FixtureRequest) -> Iterator[KubeletSimulator]:
    """Every behaviour twice: reading by a list per tick (tests ticking by hand) and by watches
    (the ``sandbox kubelet`` command)."""
    watched = WatchedLists(api) if request.param == "watches" else None
    sim = KubeletSimulator(
        api,
        LocalCloud(get_redis(redis_url)),
        heartbeat_interval=1.0,
        node_grace=2.0,
        detach_delay=0.5,
        watched=watched,
    )
    stop = threading.Event()
    if watched is not None:
        watched.start()
        wait_until(watched.synced, WAIT, what="the kubelet's watches listed once")
    thread = threading.Thread(target=sim.run, args=(stop, 0.1), daemon=True)
    thread.start()
    yield sim
    stop.set()
    thread.join(10)
    if watched is not None:
        watched.stop()


@pytest.fixture()
def namespace(core: Any) -> str:
    name = f"kl-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


def unique(prefix: str = "m") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def machine_class(**spec: Any) -> MachineClass:
    return MachineClass.model_validate(
        {
            "metadata": {"name": "kl", "namespace": "default"},
            "provider": "local",
            "providerSpec": spec,
            "nodeTemplate": {
                "capacity": {"cpu": "8", "memory": "32Gi", "gpu": "0"},
                "instanceType": "local.xlarge",
                "region": "sandbox-1",
                "zone": "sandbox-1b",
                "architecture": "arm64",
            },
        }
    )


def launch(driver: LocalDriver, name: str, **spec: Any) -> str:
    machine = Machine.model_validate({"metadata": {"name": name, "namespace": "default"}})
    req = CreateMachineRequest(machine=machine, machine_class=machine_class(**spec), secret=SECRET)
    return driver.create_machine(req).provider_id


def node_or_none(core: Any, name: str) -> Any:
    try:
        return core.read_node(name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def conditions(core: Any, name: str) -> dict[str, Any]:
    node = node_or_none(core, name)
    return {c.type: c for c in (node.status.conditions or [])} if node else {}


def wait_condition(core: Any, name: str, ctype: str, status: str, reason: str = "") -> Any:
    def ok() -> bool:
        cond = conditions(core, name).get(ctype)
        return cond is not None and cond.status == status and (not reason or cond.reason == reason)

    wait_until(ok, WAIT, what=f"{name} {ctype}={status}")
    return conditions(core, name)[ctype]


def annotate(core: Any, name: str, annotations: dict[str, str | None]) -> None:
    core.patch_node(name, {"metadata": {"annotations": annotations}}, _content_type=MERGE)


def ready_node(core: Any, driver: LocalDriver, name: str | None = None, **spec: Any) -> str:
    name = name or unique()
    launch(driver, name, **spec)
    wait_condition(core, name, "Ready", "True")
    return name


def make_pod(core: Any, ns: str, node: str, name: str = "", claim: str = "", grace: int = 1) -> str:
    name = name or unique("pod")
    spec: dict[str, Any] = {
        "nodeName": node,
        "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "app", "image": "busybox"}, {"name": "side", "image": "pause"}],
    }
    if claim:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": spec})
    return name


def pod_or_none(core: Any, ns: str, name: str) -> Any:
    try:
        return core.read_namespaced_pod(name, ns)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def running(core: Any, ns: str, name: str) -> bool:
    pod = pod_or_none(core, ns, name)
    return pod is not None and pod.status.phase == "Running"


def never(predicate: Callable[[], bool], barrier: Callable[[], bool], what: str) -> None:
    """Wait for ``barrier`` (proof that the kubelet has ticked since), checking ``predicate``
    never held meanwhile."""

    def check() -> bool:
        assert not predicate(), what
        return barrier()

    wait_until(check, WAIT, what=f"barrier for: {what}")
    assert not predicate(), what


# --- nodes ---


def test_running_vm_registers_a_ready_node(core: Any, driver: LocalDriver, kubelet: Any) -> None:
    name = unique()
    provider_id = launch(driver, name, labels={"pool": "blue"})
    wait_condition(core, name, "Ready", "True", "KubeletReady")
    node = core.read_node(name)
    assert node.spec.provider_id == provider_id
    labels = node.metadata.labels
    assert labels["node.kubernetes.io/instance-type"] == "local.xlarge"
    assert labels["topology.kubernetes.io/region"] == "sandbox-1"
    assert labels["topology.kubernetes.io/zone"] == "sandbox-1b"
    assert labels["kubernetes.io/arch"] == "arm64" and labels["pool"] == "blue"
    assert node.status.capacity["cpu"] == "8" and node.status.allocatable["memory"] == "32Gi"
    assert {a.type for a in node.status.addresses} == {"InternalIP", "Hostname"}
    conds = conditions(core, name)
    assert all(conds[t].status == "False" for t in ("MemoryPressure", "DiskPressure", "PIDPressure"))


def test_boot_delay_is_respected(
    core: Any, driver: LocalDriver, kubelet: KubeletSimulator, redis_url: str
) -> None:
    name = unique()
    launch(driver, name, bootDelaySeconds=1.5)
    [vm] = [v for v in LocalCloud(get_redis(redis_url)).all() if v.machine == name]
    kubelet.tick()
    if vm.state(time.time()) is VMState.PENDING:  # the tick above ran during the boot delay
        assert node_or_none(core, name) is None
    wait_condition(core, name, "Ready", "True")
    created = core.read_node(name).metadata.creation_timestamp.timestamp()
    assert created >= int(vm.ready_at)  # second precision


def test_never_join_vm_has_no_node(core: Any, driver: LocalDriver, kubelet: Any) -> None:
    hidden = unique()
    launch(driver, hidden, neverJoin=True)
    later = unique()
    launch(driver, later)
    never(
        lambda: node_or_none(core, hidden) is not None,
        lambda: node_or_none(core, later) is not None,
        "no node",
    )


def test_heartbeats_advance(core: Any, driver: LocalDriver, kubelet: Any) -> None:
    name = ready_node(core, driver)
    first = conditions(core, name)["Ready"].last_heartbeat_time
    since = conditions(core, name)["Ready"].last_transition_time
    wait_until(lambda: conditions(core, name)["Ready"].last_heartbeat_time > first, WAIT, what="heartbeat")
    assert conditions(core, name)["Ready"].last_transition_time == since


def test_condition_orders(core: Any, driver: LocalDriver, kubelet: Any) -> None:
    name = ready_node(core, driver)
    prefix = "sandbox.mcm-tasks.io/condition-"
    annotate(core, name, {prefix + "Ready": "False", prefix + "ReadonlyFilesystem": "True"})
    wait_condition(core, name, "Ready", "False", "SandboxOrder")
    wait_condition(core, name, "ReadonlyFilesystem", "True", "SandboxOrder")
    annotate(core, name, {prefix + "Ready": None, prefix + "ReadonlyFilesystem": None})
    wait_condition(core, name, "Ready", "True", "KubeletReady")
    wait_condition(core, name, "ReadonlyFilesystem", "False")


def test_conditions_set_by_others_are_kept(core: Any, driver: LocalDriver, kubelet: Any) -> None:
    name = ready_node(core, driver)
    mark = {"type": "Terminating", "status": "True", "reason": "ScaleDown", "message": "by MCM"}
    core.patch_node_status(
        name, {"status": {"conditions": [mark]}}, _content_type="application/strategic-merge-patch+json"
    )
    first = conditions(core, name)["Ready"].last_heartbeat_time
    wait_until(lambda: conditions(core, name)["Ready"].last_heartbeat_time > first, WAIT, what="heartbeat")
    assert conditions(core, name)["Terminating"].status == "True"


def test_heartbeat_stop_makes_the_node_unknown(core: Any, driver: LocalDriver, kubelet: Any) -> None:
    name = ready_node(core, driver)
    annotate(core, name, {"sandbox.mcm-tasks.io/heartbeat": "stop"})
    cond = wait_condition(core, name, "Ready", "Unknown", "NodeStatusUnknown")
    assert cond.message == "Kubelet stopped posting node status."
    annotate(core, name, {"sandbox.mcm-tasks.io/heartbeat": None})
    wait_condition(core, name, "Ready", "True", "KubeletReady")


def test_deleted_vm_stops_heartbeats(core: Any, driver: LocalDriver, kubelet: Any) -> None:
    name = ready_node(core, driver)
    machine = Machine.model_validate({"metadata": {"name": name, "namespace": "default"}})
    driver.delete_machine(DeleteMachineRequest(machine=machine, machine_class=machine_class(), secret=SECRET))
    wait_condition(core, name, "Ready", "Unknown", "NodeStatusUnknown")


def test_a_deleted_node_is_not_registered_again(core: Any, driver: LocalDriver, kubelet: Any) -> None:
    name = ready_node(core, driver)
    core.delete_node(name)
    later = unique()
    launch(driver, later)
    never(
        lambda: node_or_none(core, name) is not None,
        lambda: node_or_none(core, later) is not None,
        "re-registered",
    )


# --- pods ---


def test_pods_become_running_and_ready(core: Any, driver: LocalDriver, kubelet: Any, namespace: str) -> None:
    node = ready_node(core, driver)
    pod = make_pod(core, namespace, node)
    wait_until(lambda: running(core, namespace, pod), WAIT, what="pod running")
    status = core.read_namespaced_pod(pod, namespace).status
    conds = {c.type: c.status for c in status.conditions}
    assert conds == {
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    assert [c.name for c in status.container_statuses] == ["app", "side"]
    assert all(c.ready and c.state.running for c in status.container_statuses)
    assert status.host_ip == core.read_node(node).status.addresses[0].address and status.pod_ip


def test_terminating_pod_is_finalized_after_its_grace(
    core: Any, driver: LocalDriver, kubelet: Any, namespace: str
) -> None:
    node = ready_node(core, driver)
    pod = make_pod(core, namespace, node, grace=2)
    wait_until(lambda: running(core, namespace, pod), WAIT, what="pod running")
    core.delete_namespaced_pod(pod, namespace)
    deadline = core.read_namespaced_pod(pod, namespace).metadata.deletion_timestamp.timestamp()
    wait_until(lambda: pod_or_none(core, namespace, pod) is None, WAIT, what="pod finalized")
    assert time.time() >= deadline


# --- volumes ---


def make_volume(core: Any, ns: str) -> tuple[str, str, str]:
    pv, claim, handle = unique("pv"), unique("pvc"), unique("vol")
    core.create_persistent_volume(
        {
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": CSI_DRIVER, "volumeHandle": handle},
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        ns,
        {
            "metadata": {"name": claim},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeName": pv,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    return pv, claim, f"kubernetes.io/csi/{CSI_DRIVER}^{handle}"


def attached(core: Any, node: str) -> list[str]:
    found = node_or_none(core, node)
    return [v.name for v in (found.status.volumes_attached or [])] if found else []


def attachments(api: ApiClient, pv: str) -> list[Any]:
    return [
        va
        for va in client.StorageV1Api(api).list_volume_attachment().items
        if va.spec.source.persistent_volume_name == pv
    ]


def test_volumes_attach_and_detach(
    core: Any, api: ApiClient, driver: LocalDriver, kubelet: Any, namespace: str
) -> None:
    node = ready_node(core, driver)
    pv, claim, attached_name = make_volume(core, namespace)
    pod = make_pod(core, namespace, node, claim=claim)
    wait_until(lambda: running(core, namespace, pod), WAIT, what="pod with volume running")
    assert attached(core, node) == [attached_name]
    [va] = attachments(api, pv)
    assert (va.spec.attacher, va.spec.node_name, va.status.attached) == (CSI_DRIVER, node, True)
    core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
    wait_until(lambda: not attached(core, node) and not attachments(api, pv), WAIT, what="detached")


def test_a_volume_attaches_to_one_node_at_a_time(
    core: Any, api: ApiClient, driver: LocalDriver, kubelet: Any, namespace: str
) -> None:
    first, second = ready_node(core, driver), ready_node(core, driver)
    pv, claim, attached_name = make_volume(core, namespace)
    old = make_pod(core, namespace, first, claim=claim)
    wait_until(lambda: running(core, namespace, old), WAIT, what="old pod running")
    new = make_pod(core, namespace, second, claim=claim)
    other = make_pod(core, namespace, second)
    wait_until(lambda: running(core, namespace, other), WAIT, what="a pod without volumes on the second node")
    assert not running(core, namespace, new) and attached(core, second) == []
    core.delete_namespaced_pod(old, namespace, grace_period_seconds=0)
    wait_until(lambda: running(core, namespace, new), WAIT, what="new pod running after reattach")
    assert attached(core, first) == [] and attached(core, second) == [attached_name]
    assert [va.spec.node_name for va in attachments(api, pv)] == [second]


# --- the commands ---


def test_kubelet_command_and_cloud_ls(
    target: ApiServer, redis_url: str, driver: LocalDriver, core: Any, tmp_path: Path
) -> None:
    name = unique()
    provider_id = launch(driver, name)
    script = "import typer; from mcm_sandbox.cloud_cli import kubelet_command; typer.run(kubelet_command)"
    proc = ManagedProcess(
        [
            sys.executable,
            "-c",
            script,
            "--target-kubeconfig",
            str(target.kubeconfig),
            "--redis-url",
            redis_url,
            "--interval",
            "0.1",
        ],
        tmp_path / "kubelet.log",
    )
    proc.start()
    try:
        wait_condition(core, name, "Ready", "True")
    finally:
        proc.stop()
    assert proc.proc is not None and proc.proc.returncode == 0, proc.log_tail()
    result = CliRunner().invoke(cloud_app, ["ls", "--json", "--redis-url", redis_url])
    assert result.exit_code == 0, result.output
    [row] = [r for r in json.loads(result.output) if r["machine"] == name]
    assert row["providerID"] == provider_id and row["state"] == "running" and row["class"] == "default/kl"
    table = CliRunner().invoke(cloud_app, ["ls", "--redis-url", redis_url])
    assert provider_id in table.output


def test_watched_lists_follow_creates_updates_and_deletes(api: ApiClient, core: Any) -> None:
    watched = WatchedLists(api)
    watched.start()
    try:
        wait_until(watched.synced, WAIT, what="listed once")
        name = unique("n")
        core.create_node({"metadata": {"name": name}})

        def labels() -> dict[str, str] | None:
            found = [n for n in watched.list("/api/v1/nodes") if n["metadata"]["name"] == name]
            return found[0]["metadata"].get("labels") or {} if found else None

        wait_until(lambda: labels() == {}, WAIT, what="the node seen")
        core.patch_node(name, {"metadata": {"labels": {"pool": "blue"}}})
        wait_until(lambda: labels() == {"pool": "blue"}, WAIT, what="the label seen")
        core.delete_node(name)
        wait_until(lambda: labels() is None, WAIT, what="the deletion seen")
    finally:
        watched.stop()
