"""Deletion: finalizers, preconditions, propagation and GC, namespaces, graceful pods, eviction and PDBs."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, watch

from mcm_sandbox.procs import wait_until
from tests.sandbox.apiserver_support import (
    pod,
    status_of,
    unique,
    widget_crd,
)

pytestmark = pytest.mark.integration


def _gone(read: Any, *args: Any) -> bool:
    try:
        read(*args)
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _owner_ref(obj: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": obj.metadata.name, "uid": obj.metadata.uid}


def test_finalizers_hold_the_object_until_removed(core: client.CoreV1Api, ns: str) -> None:
    cm = core.create_namespaced_config_map(
        ns, {"metadata": {"name": "f", "finalizers": ["example.com/hold"]}}
    )
    core.delete_namespaced_config_map("f", ns)
    held = core.read_namespaced_config_map("f", ns)
    assert held.metadata.deletion_timestamp is not None and held.metadata.deletion_grace_period_seconds == 0
    with pytest.raises(client.ApiException) as err:  # no new finalizers while deleting
        core.patch_namespaced_config_map(
            "f", ns, {"metadata": {"finalizers": ["example.com/hold", "x.io/y"]}}
        )
    assert err.value.status == 422
    events = []
    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_config_map,
        ns,
        resource_version=held.metadata.resource_version,
        timeout_seconds=5,
    )
    core.patch_namespaced_config_map("f", ns, {"metadata": {"finalizers": None}})
    for event in stream:
        events.append((event["type"], event["object"].metadata.name))
        if event["type"] == "DELETED":
            w.stop()
    assert events == [("DELETED", "f")]
    assert _gone(core.read_namespaced_config_map, "f", ns) and cm.metadata.uid


def test_delete_preconditions(core: client.CoreV1Api, ns: str) -> None:
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "p"}})
    for pre in ({"uid": "wrong"}, {"resourceVersion": "1"}):
        with pytest.raises(client.ApiException) as err:
            core.delete_namespaced_config_map("p", ns, body=client.V1DeleteOptions(preconditions=pre))
        assert err.value.status == 409 and "Precondition failed" in status_of(err.value)["message"]
    core.delete_namespaced_config_map(
        "p",
        ns,
        body=client.V1DeleteOptions(
            preconditions={"uid": cm.metadata.uid, "resourceVersion": cm.metadata.resource_version}
        ),
    )
    assert _gone(core.read_namespaced_config_map, "p", ns)


def test_background_propagation_collects_dependents(core: client.CoreV1Api, ns: str) -> None:
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    other = core.create_namespaced_config_map(ns, {"metadata": {"name": "other"}})
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "dep", "ownerReferences": [_owner_ref(owner)]}}
    )
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "shared", "ownerReferences": [_owner_ref(owner), _owner_ref(other)]}}
    )
    core.delete_namespaced_config_map("owner", ns)
    wait_until(lambda: _gone(core.read_namespaced_config_map, "dep", ns), 5, what="dependent collected")
    shared = core.read_namespaced_config_map("shared", ns)  # another owner still exists: only the ref goes
    assert [r.name for r in shared.metadata.owner_references] == ["other"]


def test_foreground_propagation_waits_for_dependents(core: client.CoreV1Api, ns: str) -> None:
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "fg"}})
    core.create_namespaced_config_map(
        ns,
        {
            "metadata": {
                "name": "fg-dep",
                "finalizers": ["example.com/slow"],
                "ownerReferences": [_owner_ref(owner)],
            }
        },
    )
    core.delete_namespaced_config_map("fg", ns, propagation_policy="Foreground")
    deleting = core.read_namespaced_config_map("fg", ns)
    assert "foregroundDeletion" in deleting.metadata.finalizers and deleting.metadata.deletion_timestamp
    wait_until(
        lambda: core.read_namespaced_config_map("fg-dep", ns).metadata.deletion_timestamp is not None, 5
    )
    assert core.read_namespaced_config_map("fg", ns).metadata.deletion_timestamp  # still waiting
    core.patch_namespaced_config_map("fg-dep", ns, {"metadata": {"finalizers": None}})
    wait_until(
        lambda: _gone(core.read_namespaced_config_map, "fg", ns), 5, what="owner gone after dependents"
    )


def test_orphan_propagation_keeps_dependents(core: client.CoreV1Api, ns: str) -> None:
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "o"}})
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "o-dep", "ownerReferences": [_owner_ref(owner)]}}
    )
    core.delete_namespaced_config_map("o", ns, propagation_policy="Orphan")
    wait_until(lambda: _gone(core.read_namespaced_config_map, "o", ns), 5, what="owner gone")
    assert not core.read_namespaced_config_map("o-dep", ns).metadata.owner_references


def test_dangling_owner_reference_is_collected(core: client.CoreV1Api, ns: str) -> None:
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "ghost",
        "uid": "00000000-dead-beef-0000-000000000000",
    }
    core.create_namespaced_config_map(ns, {"metadata": {"name": "orphan", "ownerReferences": [ref]}})
    wait_until(
        lambda: _gone(core.read_namespaced_config_map, "orphan", ns), 5, what="dangling dependent gone"
    )


def test_delete_collection_with_selector(core: client.CoreV1Api, ns: str) -> None:
    for i in range(4):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"c{i}", "labels": {"odd": str(i % 2)}}})
    core.delete_collection_namespaced_config_map(ns, label_selector="odd=1")
    assert sorted(c.metadata.name for c in core.list_namespaced_config_map(ns).items) == ["c0", "c2"]


def test_namespace_deletion_removes_its_objects(core: client.CoreV1Api) -> None:
    name = unique("doomed")
    core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_config_map(name, {"metadata": {"name": "a", "finalizers": ["example.com/hold"]}})
    core.create_namespaced_secret(name, {"metadata": {"name": "s"}})
    core.delete_namespace(name)
    assert core.read_namespace(name).status.phase == "Terminating"
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(name, {"metadata": {"name": "late"}})
    assert err.value.status == 403
    wait_until(lambda: not core.list_namespaced_secret(name).items, 5, what="contents deleted")
    assert core.read_namespace(name).status.phase == "Terminating"  # a finalizer still holds a configmap
    core.patch_namespaced_config_map("a", name, {"metadata": {"finalizers": None}})
    wait_until(lambda: _gone(core.read_namespace, name), 5, what="namespace gone")


def test_crd_deletion_removes_its_custom_resources(session_api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(session_api)
    crd = widget_crd("doodads", "Doodad")
    ext.create_custom_resource_definition(crd)
    custom = client.CustomObjectsApi(session_api)
    group = crd["spec"]["group"]
    custom.create_namespaced_custom_object(
        group,
        "v1",
        "default",
        "doodads",
        {"apiVersion": f"{group}/v1", "kind": "Doodad", "metadata": {"name": "d"}, "spec": {"replicas": 1}},
    )
    ext.delete_custom_resource_definition(crd["metadata"]["name"])
    wait_until(
        lambda: _gone(ext.read_custom_resource_definition, crd["metadata"]["name"]), 5, what="CRD gone"
    )
    with pytest.raises(client.ApiException) as err:
        custom.list_namespaced_custom_object(group, "v1", "default", "doodads")
    assert err.value.status == 404


def test_pod_graceful_deletion_timer_mode(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("slow", node="n1", grace=1))
    core.create_namespaced_pod(ns, pod("forced", node="n1", grace=30))
    core.create_namespaced_pod(ns, pod("unscheduled", grace=30))
    core.delete_namespaced_pod("slow", ns)
    core.delete_namespaced_pod("forced", ns, grace_period_seconds=0)
    core.delete_namespaced_pod("unscheduled", ns)
    terminating = core.read_namespaced_pod("slow", ns)
    assert terminating.metadata.deletion_timestamp and terminating.metadata.deletion_grace_period_seconds == 1
    assert _gone(core.read_namespaced_pod, "forced", ns) and _gone(
        core.read_namespaced_pod, "unscheduled", ns
    )
    wait_until(lambda: _gone(core.read_namespaced_pod, "slow", ns), 5, what="grace period elapsed")


def test_pod_graceful_deletion_kubelet_and_immediate_modes(own_server: Any) -> None:
    _, kubelet_api = own_server("--pod-grace-mode", "kubelet", name="kubelet")
    core = client.CoreV1Api(kubelet_api)
    core.create_namespaced_pod("default", pod("p", node="n1", grace=1))
    core.delete_namespaced_pod("p", "default")
    assert core.read_namespaced_pod("p", "default").metadata.deletion_timestamp
    core.delete_namespaced_pod("p", "default", grace_period_seconds=0)  # what the kubelet does when done
    assert _gone(core.read_namespaced_pod, "p", "default")
    _, immediate_api = own_server("--pod-grace-mode", "immediate", name="immediate")
    core = client.CoreV1Api(immediate_api)
    core.create_namespaced_pod("default", pod("p", node="n1", grace=30))
    core.delete_namespaced_pod("p", "default")
    assert _gone(core.read_namespaced_pod, "p", "default")


def _ready_pod(core: client.CoreV1Api, ns: str, name: str, labels: dict[str, str]) -> None:
    core.create_namespaced_pod(ns, pod(name, node="n1", grace=30, labels=labels))
    core.patch_namespaced_pod_status(
        name, ns, {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    )


def _evict(core: client.CoreV1Api, ns: str, name: str) -> Any:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))
    return core.create_namespaced_pod_eviction(name, ns, body)


def test_eviction_honours_pod_disruption_budgets(
    core: client.CoreV1Api, kube_api: client.ApiClient, ns: str
) -> None:
    policy = client.PolicyV1Api(kube_api)
    for i in range(3):
        _ready_pod(core, ns, f"web-{i}", {"app": "web"})
    policy.create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        },
    )

    def budget() -> Any:
        return policy.read_namespaced_pod_disruption_budget("web", ns).status

    wait_until(
        lambda: budget().current_healthy == 3 and budget().disruptions_allowed == 1, 5, what="PDB status"
    )
    assert budget().desired_healthy == 2 and budget().expected_pods == 3 and budget().observed_generation == 1
    _evict(core, ns, "web-0")
    assert core.read_namespaced_pod("web-0", ns).metadata.deletion_timestamp  # deleted gracefully
    assert budget().disruptions_allowed == 0
    with pytest.raises(client.ApiException) as err:
        _evict(core, ns, "web-1")
    assert err.value.status == 429 and err.value.reason == "Too Many Requests"
    status = status_of(err.value)
    assert status["reason"] == "TooManyRequests" and "web" in status["details"]["causes"][0]["message"]
    policy.create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": "web2"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    with pytest.raises(client.ApiException) as err:
        _evict(core, ns, "web-2")
    assert err.value.status == 500


def test_pdb_status_follows_pods(core: client.CoreV1Api, kube_api: client.ApiClient, ns: str) -> None:
    policy = client.PolicyV1Api(kube_api)
    policy.create_namespaced_pod_disruption_budget(
        ns,
        {"metadata": {"name": "b"}, "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "b"}}}},
    )
    _ready_pod(core, ns, "b-0", {"app": "b"})
    wait_until(lambda: policy.read_namespaced_pod_disruption_budget("b", ns).status.current_healthy == 1, 5)
    core.patch_namespaced_pod_status(
        "b-0", ns, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )
    wait_until(lambda: policy.read_namespaced_pod_disruption_budget("b", ns).status.current_healthy == 0, 5)
