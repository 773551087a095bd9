"""The kubelet simulator's pure decisions: node conditions and orders, heartbeats, node-lifecycle,
pod status, and attach/detach planning."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_sandbox.kubelet import node as kn
from mcm_sandbox.kubelet import pods as kp
from mcm_sandbox.kubelet.volumes import plan_volumes
from providers.local.cloud import LocalVM

T0 = 1_700_000_000.0
DRIVER = "local.csi.mcm-tasks.io"


def vm(**over: Any) -> LocalVM:
    base: dict[str, Any] = {
        "id": "i-1",
        "provider_id": "local:///z/i-1",
        "machine": "n1",
        "machine_class": "default/c",
        "zone": "z",
        "region": "r",
        "instance_type": "t",
        "architecture": "arm64",
        "capacity": {"cpu": "2"},
        "labels": {"extra": "yes"},
        "internal_ip": "10.0.0.9",
        "created": T0,
        "ready_at": T0,
    }
    return LocalVM.model_validate({**base, **over})


def registered(at: float = T0, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    node = kn.node_manifest(vm(), at)
    node["metadata"]["annotations"] = annotations or {}
    return node


def statuses(conditions: list[dict[str, Any]]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in conditions}


# --- nodes ---


def test_manifest_carries_identity_labels_capacity_and_healthy_conditions() -> None:
    node = kn.node_manifest(vm(), T0)
    assert node["spec"]["providerID"] == "local:///z/i-1"
    labels = node["metadata"]["labels"]
    assert labels["topology.kubernetes.io/zone"] == "z" and labels["kubernetes.io/arch"] == "arm64"
    assert labels["extra"] == "yes" and labels["node.kubernetes.io/instance-type"] == "t"
    assert node["status"]["capacity"] == node["status"]["allocatable"] == {"cpu": "2"}
    assert statuses(node["status"]["conditions"]) == {
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
        "Ready": "True",
    }
    assert kn.node_ip(node) == "10.0.0.9" and kn.is_local_node(node)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, {}),
        ({"sandbox.mcm-tasks.io/condition-Ready": "False"}, {"Ready": "False"}),
        ({"sandbox.mcm-tasks.io/condition-ReadonlyFilesystem": "true"}, {"ReadonlyFilesystem": "True"}),
        ({"sandbox.mcm-tasks.io/condition-Ready": "maybe"}, {}),
        ({"sandbox.mcm-tasks.io/condition-": "True"}, {}),
        ({"other/condition-Ready": "False"}, {}),
    ],
)
def test_condition_orders(annotations: dict[str, str], expected: dict[str, str]) -> None:
    assert kn.ordered_conditions(annotations) == expected


@pytest.mark.parametrize(("value", "stopped"), [("stop", True), ("STOP ", True), ("run", False), ("", False)])
def test_heartbeat_stop_order(value: str, stopped: bool) -> None:
    assert kn.heartbeat_stopped({kn.HEARTBEAT_ANNOTATION: value}) is stopped


def test_heartbeat_due_by_age_or_by_order() -> None:
    node = registered()
    period = kn.heartbeat_period("n1", 10)
    assert 10 <= period < 12.5
    assert not kn.heartbeat_due(node, T0 + 9.9, interval=10)
    assert kn.heartbeat_due(node, T0 + period + 0.01, interval=10)
    ordered = registered(annotations={"sandbox.mcm-tasks.io/condition-Ready": "False"})
    assert kn.status_changed(ordered) and kn.heartbeat_due(ordered, T0 + 1, interval=10)


def test_heartbeat_periods_differ_between_nodes() -> None:
    assert len({kn.heartbeat_period(f"n{i}", 10) for i in range(50)}) > 10


def test_heartbeat_keeps_transition_time_unless_the_status_changes() -> None:
    node = registered()
    same = {c["type"]: c for c in kn.heartbeat_conditions(node, T0 + 30)}
    assert same["Ready"]["lastTransitionTime"] == kn.iso(T0)
    assert same["Ready"]["lastHeartbeatTime"] == kn.iso(T0 + 30)
    node["metadata"]["annotations"] = {"sandbox.mcm-tasks.io/condition-Ready": "False"}
    changed = {c["type"]: c for c in kn.heartbeat_conditions(node, T0 + 30)}
    assert changed["Ready"]["status"] == "False" and changed["Ready"]["lastTransitionTime"] == kn.iso(T0 + 30)
    assert changed["Ready"]["reason"] == kn.ORDER_REASON


def test_a_lifted_order_goes_back_to_healthy() -> None:
    node = registered(annotations={"sandbox.mcm-tasks.io/condition-KernelDeadlock": "True"})
    node["status"]["conditions"] = kn.heartbeat_conditions(node, T0)
    node["metadata"]["annotations"] = {}
    assert kn.desired_statuses(node)["KernelDeadlock"][0] == "False"
    node["status"]["conditions"] = kn.heartbeat_conditions(node, T0 + 1)
    assert "KernelDeadlock" not in kn.desired_statuses(node)  # no longer the kubelet's to post


def test_lifecycle_marks_a_silent_node_unknown_once() -> None:
    node = registered()
    assert kn.lifecycle_unknown_conditions(node, T0 + 39, grace=40) is None
    unknown = kn.lifecycle_unknown_conditions(node, T0 + 40, grace=40)
    assert unknown is not None
    assert set(statuses(unknown).values()) == {"Unknown"}
    assert all(c["lastHeartbeatTime"] == kn.iso(T0) for c in unknown)
    node["status"]["conditions"] = unknown
    assert kn.lifecycle_unknown_conditions(node, T0 + 100, grace=40) is None


# --- pods ---


def pod(name: str = "p", node: str = "n1", claims: tuple[str, ...] = (), **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "img"}],
            "volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims],
        },
        "status": status,
    }


def test_running_status_makes_the_pod_running_and_ready() -> None:
    p = pod(phase="Pending")
    assert not kp.is_running_ready(p)
    p["status"] = kp.running_status(p, "10.0.0.9", T0)["status"]
    assert kp.is_running_ready(p)
    assert p["status"]["hostIP"] == "10.0.0.9" and p["status"]["containerStatuses"][0]["ready"]
    assert p["status"]["podIP"] == kp.pod_ip(pod())


def test_grace_elapses_at_the_deletion_timestamp() -> None:
    p = pod()
    assert not kp.grace_elapsed(p, T0)
    p["metadata"]["deletionTimestamp"] = kn.iso(T0 + 30)
    assert kp.is_terminating(p)
    assert not kp.grace_elapsed(p, T0 + 29) and kp.grace_elapsed(p, T0 + 30)


# --- volumes ---


def storage(*names: str) -> tuple[dict[tuple[str, str], Any], dict[str, Any]]:
    pvcs = {
        ("ns", n): {"metadata": {"name": n, "namespace": "ns"}, "spec": {"volumeName": f"pv-{n}"}}
        for n in names
    }
    pvs = {
        f"pv-{n}": {
            "metadata": {"name": f"pv-{n}"},
            "spec": {"csi": {"driver": DRIVER, "volumeHandle": f"h-{n}"}},
        }
        for n in names
    }
    return pvcs, pvs


def node(name: str, *attached: str) -> dict[str, Any]:
    entries = [{"name": a, "devicePath": "/dev/disk/by-id/sandbox-" + a.split("^")[-1]} for a in attached]
    return {"metadata": {"name": name}, "status": {"volumesAttached": entries}}


def va(pv: str, node_name: str, attached: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": f"va-{pv}-{node_name}"},
        "spec": {"nodeName": node_name, "source": {"persistentVolumeName": pv}},
        "status": {"attached": attached},
    }


NAME_A = f"kubernetes.io/csi/{DRIVER}^h-a"


def test_claims_resolve_to_csi_volumes_only() -> None:
    pvcs, pvs = storage("a")
    pvs["pv-b"] = {"metadata": {"name": "pv-b"}, "spec": {"hostPath": {"path": "/x"}}}
    pvcs[("ns", "b")] = {"spec": {"volumeName": "pv-b"}}
    pvcs[("ns", "unbound")] = {"spec": {}}
    vols = kp.pod_volumes(pod(claims=("a", "b", "unbound", "missing")), pvcs, pvs)
    assert [v.attached_name for v in vols] == [NAME_A]


def test_attach_creates_the_attachment_and_the_node_entry() -> None:
    pvcs, pvs = storage("a")
    [plan] = plan_volumes(
        {"n1": node("n1")}, [pod(claims=("a",))], pvcs, pvs, [], lambda n: True, {}, T0, 1.0
    )
    [created] = plan.create
    assert created["spec"] == {
        "attacher": DRIVER,
        "nodeName": "n1",
        "source": {"persistentVolumeName": "pv-a"},
    }
    assert plan.mark_attached == [created["metadata"]["name"]]
    assert plan.volumes_attached == [{"name": NAME_A, "devicePath": "/dev/disk/by-id/sandbox-h-a"}]


def test_nothing_to_do_when_attached() -> None:
    pvcs, pvs = storage("a")
    nodes = {"n1": node("n1", NAME_A)}
    plans = plan_volumes(
        nodes, [pod(claims=("a",))], pvcs, pvs, [va("pv-a", "n1")], lambda n: True, {}, T0, 1.0
    )
    assert plans == []


def test_attached_elsewhere_waits() -> None:
    pvcs, pvs = storage("a")
    nodes = {"n1": node("n1", NAME_A), "n2": node("n2")}
    pods = [pod("old", "n1", ("a",)), pod("new", "n2", ("a",))]
    plans = plan_volumes(nodes, pods, pvcs, pvs, [va("pv-a", "n1")], lambda n: True, {}, T0, 1.0)
    assert plans == []  # n1 keeps it (its pod still runs), n2 waits


def test_attached_elsewhere_by_the_nodes_own_list_waits_too() -> None:
    """The simulator's VolumeAttachment watch may lag its Node watch: n1's status lists the volume
    (its pod runs on it) before the attachment is seen; n2 must still wait."""
    pvcs, pvs = storage("a")
    nodes = {"n1": node("n1", NAME_A), "n2": node("n2")}
    pods = [pod("old", "n1", ("a",)), pod("new", "n2", ("a",))]
    plans = plan_volumes(nodes, pods, pvcs, pvs, [], lambda n: True, {}, T0, 1.0)
    assert [p.node for p in plans] == ["n1"]  # n1 writes its attachment again (a 409); n2 waits


def test_detach_waits_for_the_delay() -> None:
    unused: dict[tuple[str, str], float] = {}
    nodes = {"n1": node("n1", NAME_A)}
    vas = [va("pv-a", "n1")]
    assert plan_volumes(nodes, [], {}, {}, vas, lambda n: True, unused, T0, 1.0) == []
    [plan] = plan_volumes(nodes, [], {}, {}, vas, lambda n: True, unused, T0 + 1, 1.0)
    assert plan.delete == ["va-pv-a-n1"] and plan.volumes_attached == []


def test_a_volume_used_again_restarts_the_detach_clock() -> None:
    pvcs, pvs = storage("a")
    unused: dict[tuple[str, str], float] = {}
    nodes = {"n1": node("n1", NAME_A)}
    vas = [va("pv-a", "n1")]
    plan_volumes(nodes, [], pvcs, pvs, vas, lambda n: True, unused, T0, 1.0)
    assert unused
    plan_volumes(nodes, [pod(claims=("a",))], pvcs, pvs, vas, lambda n: True, unused, T0 + 0.5, 1.0)
    assert unused == {}


def test_a_dead_node_or_a_missing_node_detaches_everything() -> None:
    pvcs, pvs = storage("a")
    unused: dict[tuple[str, str], float] = {T: T0 - 5 for T in [("n1", "name:" + NAME_A), ("n1", "va:pv-a")]}
    nodes = {"n1": node("n1", NAME_A)}
    [plan] = plan_volumes(
        nodes, [pod(claims=("a",))], pvcs, pvs, [va("pv-a", "n1")], lambda n: False, unused, T0, 1.0
    )
    assert plan.delete == ["va-pv-a-n1"] and plan.volumes_attached == []
    unused = {("gone", "va:pv-a"): T0 - 5}
    [orphan] = plan_volumes({}, [], {}, {}, [va("pv-a", "gone")], lambda n: False, unused, T0, 1.0)
    assert orphan.delete == ["va-pv-a-gone"] and orphan.volumes_attached is None
