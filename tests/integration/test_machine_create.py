"""The creation flow against the sandbox API server, the local cloud and the kubelet simulator."""

from __future__ import annotations

import base64
import hashlib

import pytest

from mcm_tasks import kinds
from mcm_tasks.api import MachineClass
from mcm_tasks.api.constants import (
    MACHINE_JOIN_DURATION_ANNOTATION,
    MACHINE_PRIORITY_ANNOTATION,
    MCM_FINALIZER,
    NODE_FINALIZER,
    NODE_MACHINE_NAME_LABEL_KEY,
)
from mcm_tasks.controllers.machine.bootstrap_io import token_secret_name
from mcm_tasks.kube import ops
from providers.driver import CreateMachineRequest, Secret
from providers.local import LocalDriver
from tests.integration.machine_support import Env, phase_is

pytestmark = pytest.mark.integration


def test_machine_becomes_running_with_node_labels_provider_id_and_priority(env: Env) -> None:
    env.start_kubelet()
    cls = env.setup_class(
        node_template={
            "capacity": {"cpu": "2", "gpu": "0", "memory": "4Gi"},
            "instanceType": "local.small",
            "region": "local",
            "zone": "local-a",
        }
    )
    name = env.name("a")
    env.machine(
        name,
        cls,
        nodeTemplate={
            "metadata": {"labels": {"role": "worker"}},
            "spec": {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]},
        },
    )

    requeue = env.reconcile(name)
    pending = env.get(name)
    assert requeue is not None and requeue.after == 1.0
    assert MCM_FINALIZER in pending.metadata.finalizers
    assert pending.status.current_status.phase == "Pending"
    assert pending.status.current_status.timeout_active
    assert pending.status.last_operation.description == "Creating machine on cloud provider"
    [vm] = env.live_vms(name)
    assert pending.spec.provider_id == vm.provider_id and vm.provider_id.startswith("local:///local-a/")
    assert pending.metadata.labels["node"] == name
    assert pending.metadata.annotations[MACHINE_PRIORITY_ANNOTATION] == "3"

    running = env.reconcile_until(name, phase_is("Running"))
    assert running.status.last_operation.description == f"Machine {name} successfully joined the cluster"
    assert (running.status.last_operation.type, running.status.last_operation.state) == (
        "Create",
        "Successful",
    )
    assert {c.type for c in running.status.conditions} >= {"Ready"}
    assert MACHINE_JOIN_DURATION_ANNOTATION in running.metadata.annotations
    node = env.node(name)
    assert node is not None
    assert node["metadata"]["labels"][NODE_MACHINE_NAME_LABEL_KEY] == name
    assert node["metadata"]["labels"]["role"] == "worker"
    assert NODE_FINALIZER in node["metadata"]["finalizers"]
    assert {"key": "dedicated", "value": "x", "effect": "NoSchedule"} in node["spec"]["taints"]
    reasons = env.event_reasons(name)
    assert not {"MachinePending", "MachineRunning"} & reasons  # a creation's first Pending and join are quiet

    # nothing changed: another reconcile writes neither the machine nor the node
    machine_rv, node_rv = running.metadata.resource_version, node["metadata"]["resourceVersion"]
    requeue = env.reconcile(name)
    assert requeue is not None and requeue.after == 30.0  # LongRetry
    assert env.get(name).metadata.resource_version == machine_rv
    node_after = env.node(name)
    assert node_after is not None
    labels_after = node_after["metadata"].get("labels"), node_after["metadata"].get("finalizers")
    assert labels_after == (node["metadata"].get("labels"), node["metadata"].get("finalizers"))
    assert node_rv  # heartbeats move the node's resourceVersion; its metadata stayed put
    assert len(env.live_vms(name)) == 1


def test_first_two_creates_exhausted_then_running(env: Env) -> None:
    env.start_kubelet()
    cls = env.setup_class({"failCreates": {"count": 2, "code": "ResourceExhausted"}})
    name = env.name("b")
    env.machine(name, cls)

    requeue = env.reconcile(name)
    first = env.get(name)
    assert requeue is not None and requeue.after == 1.0  # resource_exhausted_retry
    assert first.status.current_status.phase == "CrashLoopBackOff"
    assert first.status.last_operation.error_code == "ResourceExhausted"
    assert first.status.last_operation.description.startswith("Cloud provider message - ")
    assert (first.status.last_operation.type, first.status.last_operation.state) == ("Create", "Failed")
    assert "MachineCrashLoopBackOff" in env.event_reasons(name)
    assert env.live_vms(name) == []

    env.reconcile(name)  # the second failure says the same: the status is not written again
    assert env.get(name).metadata.resource_version == first.metadata.resource_version

    pending = env.reconcile_until(name, phase_is("Pending"), timeout=5)
    assert pending.spec.provider_id
    env.reconcile_until(name, phase_is("Running"))
    assert len(env.live_vms(name)) == 1


def test_a_vm_that_never_joins_fails_after_the_creation_timeout(env: Env) -> None:
    env.settings(machine_creation_timeout="3s")
    cls = env.setup_class({"neverJoin": True})
    name = env.name("c")
    env.machine(name, cls)
    env.reconcile(name)
    assert env.get(name).status.current_status.phase == "Pending"
    env.reconcile(name)
    assert env.get(name).status.current_status.phase == "Pending"  # not yet timed out
    failed = env.reconcile_until(name, phase_is("Failed"))
    assert (
        failed.status.last_operation.description
        == f"Machine {name} failed to join the cluster in 3s minutes."
    )
    assert failed.status.last_operation.state == "Failed"
    assert "MachineFailed" in env.event_reasons(name)


def test_an_existing_vm_is_adopted_not_duplicated(env: Env) -> None:
    env.start_kubelet()
    cls = env.setup_class()
    name = env.name("d")
    machine = env.machine(name, cls)
    klass = ops.get(env.api, kinds.MACHINE_CLASS.resource, cls, env.namespace)
    assert klass is not None
    existing = LocalDriver(env.redis_url).create_machine(
        CreateMachineRequest(
            machine=machine,
            machine_class=MachineClass.model_validate(klass),
            secret=Secret(data={"userData": b"x"}),
        )
    )
    env.reconcile(name)
    adopted = env.get(name)
    assert adopted.spec.provider_id == existing.provider_id
    assert adopted.status.current_status.phase == "Pending"
    env.reconcile_until(name, phase_is("Running"))
    assert [vm.provider_id for vm in env.live_vms(name)] == [existing.provider_id]


def test_a_stale_node_of_another_vm_fails_the_machine_and_removes_the_new_vm(env: Env) -> None:
    cls = env.setup_class()
    name = env.name("e")
    ops.create(
        env.api,
        kinds.NODE.resource,
        {"metadata": {"name": name}, "spec": {"providerID": "local:///local-a/i-old"}},
    )
    env.machine(name, cls)
    env.reconcile(name)
    failed = env.get(name)
    assert failed.status.current_status.phase == "Failed"
    assert failed.status.last_operation.description == "VM using old node obj"
    assert failed.spec.provider_id == ""
    assert env.live_vms(name) == []
    assert "MachineFailed" in env.event_reasons(name)
    env.reconcile(name)  # a Failed machine is not created again
    assert env.live_vms(name) == []
    assert env.get(name).metadata.resource_version == failed.metadata.resource_version


def test_bootstrap_token_is_made_for_user_data_that_asks_and_deleted_on_join(env: Env) -> None:
    env.start_kubelet()
    secret, cls, name = env.name("secret"), env.name("class"), env.name("f")
    env.secret(secret, {"userData": b"kubeadm join --token <<BOOTSTRAP_TOKEN>> # <<MACHINE_NAME>>"})
    env.machine_class(cls, secret=secret)
    env.machine(name, cls)
    env.reconcile(name)
    token = ops.get(env.api, kinds.SECRET.resource, token_secret_name(name), "kube-system", missing_ok=True)
    assert token is not None and token["type"] == "bootstrap.kubernetes.io/token"
    [vm] = env.live_vms(name)
    token_id = base64.b64decode(token["data"]["token-id"]).decode()
    token_secret = base64.b64decode(token["data"]["token-secret"]).decode()
    expected = f"kubeadm join --token {token_id}.{token_secret} # {name}".encode()
    assert vm.user_data_sha256 == hashlib.sha256(expected).hexdigest()
    env.reconcile_until(name, phase_is("Running"))
    assert (
        ops.get(env.api, kinds.SECRET.resource, token_secret_name(name), "kube-system", missing_ok=True)
        is None
    )


def test_no_bootstrap_token_without_the_placeholder(env: Env) -> None:
    cls = env.setup_class()
    name = env.name("g")
    env.machine(name, cls)
    env.reconcile(name)
    assert env.get(name).status.current_status.phase == "Pending"
    assert (
        ops.get(env.api, kinds.SECRET.resource, token_secret_name(name), "kube-system", missing_ok=True)
        is None
    )


def test_creation_marker_is_gone_after_the_flow(env: Env) -> None:
    from mcm_tasks.controllers.common.context_io import creation_in_progress

    cls = env.setup_class()
    name = env.name("h")
    env.machine(name, cls)
    env.reconcile(name)
    assert not creation_in_progress(env.key(name))


def test_deleting_machine_is_handed_to_the_termination_queue(env: Env) -> None:
    cls = env.setup_class()
    name = env.name("i")
    env.machine(name, cls)
    env.reconcile(name)
    ops.delete(env.api, kinds.MACHINE.resource, name, env.namespace)
    deleting = env.get(name)
    assert deleting.metadata.deletion_timestamp is not None
    assert env.reconcile(name) is None
    assert env.get(name).metadata.resource_version == deleting.metadata.resource_version
    from mcm_tasks.queue.messages import queue_keys
    from mcm_tasks.redisdb import get_redis

    keys = queue_keys("machine-termination")
    client = get_redis()
    assert any(env.key(name) in str(v) for k in keys.as_list() for v in _dump(client, k))


def _dump(client: object, key: str) -> list[object]:
    import redis

    assert isinstance(client, redis.Redis)
    kind = client.type(key)
    if kind == "hash":
        return list(client.hgetall(key).items())  # type: ignore[union-attr]
    if kind == "zset":
        return list(client.zrange(key, 0, -1))  # type: ignore[arg-type]
    if kind == "list":
        return list(client.lrange(key, 0, -1))  # type: ignore[arg-type]
    if kind == "set":
        return list(client.smembers(key))  # type: ignore[arg-type]
    if kind == "string":
        return [client.get(key)]
    return []


def test_frozen_controller_leaves_machines_alone(env: Env) -> None:
    from mcm_tasks.controllers.common.frozen_io import set_frozen

    cls = env.setup_class()
    name = env.name("j")
    env.machine(name, cls)
    set_frozen(True)
    try:
        requeue = env.reconcile(name)
        assert requeue is not None and requeue.after == 30.0
        assert env.get(name).status.current_status.phase == ""
        assert env.live_vms(name) == []
    finally:
        set_frozen(False)
    env.reconcile(name)
    assert env.get(name).status.current_status.phase == "Pending"


def test_no_target_mode_machine_is_available_with_addresses(env: Env) -> None:
    from mcm_tasks.kube.clients import reset_clusters

    env.settings(target_kubeconfig="none")
    reset_clusters()
    cls = env.setup_class()
    name = env.name("k")
    env.machine(name, cls)
    env.reconcile(name)
    available = env.get(name)
    assert available.status.current_status.phase == "Available"
    assert available.status.last_operation.description == "Created machine on cloud provider"
    assert "node" not in available.metadata.labels
    assert available.spec.provider_id
    assert {(a.type, a.address) for a in available.status.addresses} >= {("Hostname", name)}
    assert any(a.type == "InternalIP" for a in available.status.addresses)
    assert env.node(name) is None
    requeue = env.reconcile(name)
    assert requeue is not None and requeue.after == 30.0
    assert env.get(name).metadata.resource_version == available.metadata.resource_version
