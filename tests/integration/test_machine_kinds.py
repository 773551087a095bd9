"""MachineClass, Secret and Node reconcilers against the sandbox (§4.10, node handling)."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_tasks import kinds
from mcm_tasks.api.constants import MC_SECRET_FINALIZER, MCM_FINALIZER, NODE_FINALIZER
from mcm_tasks.controllers.common.frozen_io import set_frozen
from mcm_tasks.controllers.machine.classes import reconcile_machine_class
from mcm_tasks.controllers.machine.nodes import reconcile_node
from mcm_tasks.controllers.machine.secrets import reconcile_secret
from mcm_tasks.kube import ops, rest
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.redisdb import get_redis
from tests.integration.machine_support import Env, phase_is

pytestmark = pytest.mark.integration


def finalizers(obj: dict[str, Any] | None) -> list[str]:
    assert obj is not None
    return list(obj["metadata"].get("finalizers") or [])


def pending_keys(kind: str) -> set[str]:
    client = get_redis()
    return {str(k) for k in client.hkeys(queue_keys(kind).pending)}  # type: ignore[union-attr]


def test_class_finalizer_wakes_its_machines_and_holds_deletion(env: Env) -> None:
    secret, cls = env.name("secret"), env.name("class")
    env.secret(secret)
    env.machine_class(cls, secret=secret, reconcile=False)
    name = env.name("a")
    env.machine(name, cls)

    requeue = reconcile_machine_class(env.key(cls))
    assert requeue is not None and requeue.after == 600.0
    assert MCM_FINALIZER in finalizers(ops.get(env.api, kinds.MACHINE_CLASS.resource, cls, env.namespace))
    assert env.key(name) in pending_keys("machine")

    ops.delete(env.api, kinds.MACHINE_CLASS.resource, cls, env.namespace)
    requeue = reconcile_machine_class(env.key(cls))
    assert requeue is not None and requeue.after == 1.0
    assert MCM_FINALIZER in finalizers(ops.get(env.api, kinds.MACHINE_CLASS.resource, cls, env.namespace))

    ops.patch(env.api, kinds.MACHINE.resource, name, {"metadata": {"finalizers": []}}, env.namespace)
    ops.delete(env.api, kinds.MACHINE.resource, name, env.namespace, missing_ok=True)
    assert reconcile_machine_class(env.key(cls)) is None
    assert ops.get(env.api, kinds.MACHINE_CLASS.resource, cls, env.namespace, missing_ok=True) is None


def test_a_class_being_deleted_enqueues_the_machines_that_use_it(env: Env) -> None:
    """The seeds' reconcileClusterMachineClass: deleted while machines still use it, the class keeps
    its finalizer and enqueues those machines (on the termination queue for one being deleted).
    Upstream's case: "Class deletion fails as machine objects are still referring the machine class
    hence retry" (its current code retries without the enqueue)."""
    cls = env.name("class")
    env.machine_class(cls, reconcile=False)
    ops.patch(env.api, kinds.MACHINE_CLASS.resource, cls, {"metadata": {"finalizers": [MCM_FINALIZER]}},
              env.namespace)  # fmt: skip
    staying, going = env.name("staying"), env.name("going")
    env.machine(staying, cls)
    env.machine(going, cls)
    ops.patch(env.api, kinds.MACHINE.resource, going, {"metadata": {"finalizers": ["keep"]}}, env.namespace)
    ops.delete(env.api, kinds.MACHINE.resource, going, env.namespace)
    assert env.key(staying) not in pending_keys("machine")
    ops.delete(env.api, kinds.MACHINE_CLASS.resource, cls, env.namespace)
    requeue = reconcile_machine_class(env.key(cls))
    assert requeue is not None and requeue.after == 1.0
    assert MCM_FINALIZER in finalizers(ops.get(env.api, kinds.MACHINE_CLASS.resource, cls, env.namespace))
    assert env.key(staying) in pending_keys("machine")
    assert env.key(going) in pending_keys("machine-termination")
    ops.patch(env.api, kinds.MACHINE.resource, going, {"metadata": {"finalizers": None}}, env.namespace)


def test_class_finalizer_only_while_machines_use_the_class(env: Env) -> None:
    """Upstream's reconcileClusterMachineClass: an unused class carries no finalizer (and loses one
    it has); a machine using it brings the finalizer."""
    unused, used = env.name("unused"), env.name("used")
    env.machine_class(unused, reconcile=False)
    env.machine_class(used, reconcile=False)
    assert reconcile_machine_class(env.key(unused)) is not None
    assert finalizers(ops.get(env.api, kinds.MACHINE_CLASS.resource, unused, env.namespace)) == []
    ops.patch(
        env.api,
        kinds.MACHINE_CLASS.resource,
        unused,
        {"metadata": {"finalizers": [MCM_FINALIZER]}},
        env.namespace,
    )
    reconcile_machine_class(env.key(unused))
    assert finalizers(ops.get(env.api, kinds.MACHINE_CLASS.resource, unused, env.namespace)) == []
    env.machine(env.name("m"), used)
    reconcile_machine_class(env.key(used))
    assert finalizers(ops.get(env.api, kinds.MACHINE_CLASS.resource, used, env.namespace)) == [MCM_FINALIZER]


def test_secret_finalizer_follows_references(env: Env) -> None:
    secret, unused, cls = env.name("secret"), env.name("unused"), env.name("class")
    env.secret(secret)
    env.secret(unused)
    env.machine_class(cls, secret=secret)
    reconcile_secret(env.key(secret))
    reconcile_secret(env.key(unused))
    assert MC_SECRET_FINALIZER in finalizers(ops.get(env.api, kinds.SECRET.resource, secret, env.namespace))
    assert MC_SECRET_FINALIZER not in finalizers(
        ops.get(env.api, kinds.SECRET.resource, unused, env.namespace)
    )

    # deleting a referenced secret: held by the finalizer
    ops.delete(env.api, kinds.SECRET.resource, secret, env.namespace)
    reconcile_secret(env.key(secret))
    assert MC_SECRET_FINALIZER in finalizers(ops.get(env.api, kinds.SECRET.resource, secret, env.namespace))

    # the class goes away: the secret is released and its deletion completes
    ops.patch(env.api, kinds.MACHINE_CLASS.resource, cls, {"metadata": {"finalizers": []}}, env.namespace)
    ops.delete(env.api, kinds.MACHINE_CLASS.resource, cls, env.namespace, missing_ok=True)
    assert reconcile_secret(env.key(secret)) is None
    assert ops.get(env.api, kinds.SECRET.resource, secret, env.namespace, missing_ok=True) is None


def test_classes_outside_the_controller_namespace_do_not_hold_a_secret(env: Env) -> None:
    """Upstream's lister is namespaced to ``--namespace``, and so is the chart's Role: the live
    fallback (mirror not synced) lists classes there only, never across namespaces."""
    secret, other = env.name("secret"), f"{env.namespace}-other"
    env.secret(secret)
    rest.request(env.api, "POST", "/api/v1/namespaces", body={"metadata": {"name": other}})
    foreign = {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": env.name("foreign"), "namespace": other},
        "provider": "local",
        "providerSpec": {},
        "secretRef": {"name": secret, "namespace": env.namespace},
    }
    ops.create(env.api, kinds.MACHINE_CLASS.resource, foreign, other)
    reconcile_secret(env.key(secret))
    assert MC_SECRET_FINALIZER not in finalizers(
        ops.get(env.api, kinds.SECRET.resource, secret, env.namespace)
    )


def test_credentials_secret_is_protected_too(env: Env) -> None:
    user, creds, cls = env.name("user"), env.name("creds"), env.name("class")
    env.secret(user)
    env.secret(creds, {"token": b"t"})
    env.machine_class(cls, secret=user, credentialsSecretRef={"name": creds, "namespace": env.namespace})
    reconcile_secret(env.key(creds))
    assert MC_SECRET_FINALIZER in finalizers(ops.get(env.api, kinds.SECRET.resource, creds, env.namespace))


def running(env: Env, base: str) -> str:
    env.start_kubelet()
    cls = env.setup_class()
    name = env.name(base)
    env.machine(name, cls)
    env.reconcile_until(name, phase_is("Running"))
    return name


def test_node_reconcile_adds_the_finalizer(env: Env) -> None:
    name = running(env, "b")
    ops.patch(env.api, kinds.NODE.resource, name, {"metadata": {"finalizers": []}})
    reconcile_node(name)
    assert NODE_FINALIZER in finalizers(env.node(name))


def test_a_deleted_node_deletes_its_machine(env: Env) -> None:
    name = running(env, "c")
    ops.delete(env.api, kinds.NODE.resource, name)  # held by the node finalizer: deletionTimestamp set
    reconcile_node(name)
    assert env.get(name).metadata.deletion_timestamp is not None


def test_a_node_gone_for_good_deletes_its_machine(env: Env) -> None:
    name = running(env, "d")
    ops.patch(env.api, kinds.NODE.resource, name, {"metadata": {"finalizers": []}})
    ops.delete(env.api, kinds.NODE.resource, name)
    assert env.node(name) is None
    reconcile_node(name)
    assert env.get(name).metadata.deletion_timestamp is not None


def test_trigger_deletion_annotation_deletes_the_machine(env: Env) -> None:
    name = running(env, "e")
    env.annotate_node(name, {"node.machine.sapcloud.io/trigger-deletion-by-mcm": "true"})
    reconcile_node(name)
    assert env.get(name).metadata.deletion_timestamp is not None


def test_not_managed_nodes_are_ignored(env: Env) -> None:
    name = running(env, "f")
    env.annotate_node(name, {"node.machine.sapcloud.io/not-managed-by-mcm": "1"})
    ops.patch(env.api, kinds.NODE.resource, name, {"metadata": {"finalizers": ["example.com/hold"]}})
    ops.delete(env.api, kinds.NODE.resource, name)  # being deleted, but not ours to act on
    reconcile_node(name)
    assert env.get(name).metadata.deletion_timestamp is None
    assert finalizers(env.node(name)) == ["example.com/hold"]
    ops.patch(env.api, kinds.NODE.resource, name, {"metadata": {"finalizers": []}})


def test_a_machine_pass_that_does_not_sync_its_node_hands_the_node_to_the_node_task(env: Env) -> None:
    """The informer leaves the node task out for a joining node whose machine pass syncs it
    (``routing_target.machine_pass_syncs_node``); a pass that stops before the node sync (here: the
    controller frozen) enqueues the node task while the node lacks its finalizer."""
    name = running(env, "g")
    client = get_redis()
    ops.patch(env.api, kinds.NODE.resource, name, {"metadata": {"finalizers": []}})
    client.delete(queue_keys("node").pending)
    set_frozen(True)
    try:
        env.reconcile(name)
    finally:
        set_frozen(False)
    assert name in pending_keys("node")

    client.delete(queue_keys("node").pending)
    env.reconcile(name)  # not frozen: the pass's node sync puts the finalizer back itself
    assert NODE_FINALIZER in finalizers(env.node(name))
    assert name not in pending_keys("node")
