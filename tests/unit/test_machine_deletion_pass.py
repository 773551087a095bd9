"""Whole passes of the deletion flow (``reconcile_termination``, the ``machine-termination``
queue's entry) on the recording fake (tests/kube_fake.py). The local cloud's VMs, the drain's
state and the queue's keys live in a real Redis, as in production."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from mcm_tasks.api.constants import MCM_FINALIZER, NODE_FINALIZER, PRE_DRAIN_HOOK_PREFIX
from mcm_tasks.controllers.machine.deletion import reconcile_termination
from mcm_tasks.controllers.machine.reconcile import reconcile_machine
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, get_settings, reset_settings
from providers.local import LocalCloud
from tests.kube_fake import FakeKube
from tests.unit.pass_support import MACHINES, NS, Obj, machine, machine_class, node, secret

KEY = f"{NS}/m1"


@pytest.fixture(autouse=True)
def settings(redis_url: str) -> Iterator[None]:
    configure({"redis_url": redis_url, "namespace": NS})
    yield
    reset_settings()


def deleting(**meta: Obj) -> Obj:
    """m1 after its creation pass (VM, node label, providerID), Running, its deletion just asked."""
    kube = FakeKube([secret(), machine_class(), machine("m1")])
    with kube.installed():
        reconcile_machine(KEY)
    created = kube.get_object(MACHINES, "m1", NS)
    assert created is not None
    created["metadata"].update(deletionTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), **meta)
    created["status"]["currentStatus"]["phase"] = "Running"
    return created


def live_vms() -> list[str]:
    return [vm.id for vm in LocalCloud(get_redis()).by_machine("m1") if vm.live()]


def test_a_deleted_machine_is_drained_its_vm_and_node_deleted_and_its_finalizer_removed() -> None:
    """The whole flow in one pass (nothing to wait for: no pods, no volumes): Terminating written
    first, then cordon, drain, DeleteMachine, the Node, the finalizer; the Machine is gone."""
    m1 = deleting()
    kube = FakeKube([secret(), machine_class(), m1, node("m1", finalizers=[NODE_FINALIZER])])
    assert live_vms()

    with kube.installed():
        requeue = reconcile_termination(KEY)

    assert writes(kube) == [
        ("update", MACHINES, "m1", "status"),  # Terminating, "... getting VM Status"
        ("patch", "nodes", "m1", "status"),  # the node's Terminating condition
        ("patch", "nodes", "m1", None),  # cordon
        ("patch", "nodes", "m1", None),  # the node finalizer off
        ("delete", "nodes", "m1", None),
        ("patch", MACHINES, "m1", None),  # MCM's finalizer off
    ]
    assert kube.writes(MACHINES)[0].body["status"]["currentStatus"]["phase"] == "Terminating"
    assert kube.writes("nodes")[1].body == {"spec": {"unschedulable": True}}
    assert not live_vms()
    assert kube.get_object("nodes", "m1") is None
    assert kube.get_object(MACHINES, "m1", NS) is None
    assert [e.body["reason"] for e in kube.writes("events")] == ["MachineTerminating"]
    assert requeue is None


def test_a_pre_drain_hook_holds_the_flow_before_the_cordon() -> None:
    m1 = deleting(annotations={f"{PRE_DRAIN_HOOK_PREFIX}backup": "backup-operator"})
    kube = FakeKube([secret(), machine_class(), m1, node("m1", finalizers=[NODE_FINALIZER])])

    with kube.installed():
        requeue = reconcile_termination(KEY)

    assert writes(kube) == [
        ("update", MACHINES, "m1", "status"),  # Terminating
        ("update", MACHINES, "m1", "status"),  # waiting for the hook
    ]  # the node untouched: neither its Terminating condition nor the cordon
    held = kube.get_object(MACHINES, "m1", NS)
    assert held is not None and MCM_FINALIZER in held["metadata"]["finalizers"]
    assert "backup" in held["status"]["lastOperation"]["description"]
    node_now = kube.get_object("nodes", "m1")
    assert node_now is not None and not node_now.get("spec", {}).get("unschedulable")
    assert live_vms()
    assert requeue is not None and requeue.after == get_settings().long_retry


def writes(kube: FakeKube) -> list[tuple[str, str, str | None, str | None]]:
    return [(a.verb, a.resource, a.name, a.subresource) for a in kube.writes(MACHINES, "nodes")]


def test_the_drain_evicts_the_nodes_pods_and_the_flow_goes_on_once_they_are_gone() -> None:
    """One pass cordons and evicts (the Eviction API, as the cluster's discovery offers it) and
    waits for the pod to go, keeping the VM; the next finds the node empty and ends the flow."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "default"},
           "spec": {"nodeName": "m1", "containers": [{"name": "web", "image": "web"}]},
           "status": {"phase": "Running"}}  # fmt: skip
    kube = FakeKube([secret(), machine_class(), deleting(), node("m1", finalizers=[NODE_FINALIZER]), pod])

    with kube.installed():
        waiting = reconcile_termination(KEY)

    assert [(a.verb, a.name, a.subresource) for a in kube.writes("pods")] == [("create", "web-0", "eviction")]
    assert kube.get_object("pods", "web-0", "default") is None
    assert live_vms() and kube.get_object(MACHINES, "m1", NS) is not None
    assert waiting is not None and waiting.after <= get_settings().short_retry

    with kube.installed():
        done = reconcile_termination(KEY)

    assert not live_vms() and kube.get_object(MACHINES, "m1", NS) is None
    assert done is None


def test_a_pass_over_a_machine_whose_deletion_completed_is_done_not_failed() -> None:
    """An event during the pass that removed the finalizer runs the key once more, and the mirror may
    still hold the machine then: the writes find it gone (NotFound). The API server no longer has
    it, so the flow is over: the pass ends done, with no failure and no Warning."""
    m1 = deleting()
    kube = FakeKube([secret(), machine_class(), m1, node("m1", finalizers=[NODE_FINALIZER])])
    mirror = kube.mirror()  # the informer has not seen the deletion complete
    del kube.objects[(MACHINES, NS, "m1")]

    with kube.installed(mirror=mirror):
        requeue = reconcile_termination(KEY)

    assert requeue is None
    assert not [e for e in kube.writes("events") if e.body.get("type") == "Warning"]
