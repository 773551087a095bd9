"""Create, read, update, status and scale subresources, metadata rules — through the official client."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.sandbox.apiserver_support import (
    GROUP,
    status_of,
    unique,
    widget,
)

pytestmark = pytest.mark.integration


def test_metadata_is_filled_in_with_one_global_counter(core: client.CoreV1Api, ns: str) -> None:
    a = core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"k": "v"}})
    b = core.create_namespaced_secret(ns, {"metadata": {"name": "b"}})
    assert a.metadata.uid and b.metadata.uid and a.metadata.uid != b.metadata.uid
    assert a.metadata.creation_timestamp is not None
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)
    listed = core.list_namespaced_config_map(ns)
    assert int(listed.metadata.resource_version) >= int(b.metadata.resource_version)
    got = core.read_namespaced_config_map("a", ns)
    assert got.metadata.resource_version == a.metadata.resource_version


def test_generate_name(core: client.CoreV1Api, ns: str) -> None:
    made = core.create_namespaced_config_map(ns, {"metadata": {"generateName": "gen-"}})
    assert made.metadata.name.startswith("gen-") and len(made.metadata.name) == len("gen-") + 5


def test_namespace_must_exist(core: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map("no-such-ns", {"metadata": {"name": "x"}})
    assert err.value.status == 404 and err.value.reason == "Not Found"
    assert status_of(err.value)["details"]["kind"] == "namespaces"


def test_create_conflicts_and_invalid(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "dup"}})
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "dup"}})
    assert err.value.status == 409 and status_of(err.value)["reason"] == "AlreadyExists"
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(ns, {"metadata": {}})
    status = status_of(err.value)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "metadata.name"
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "Not_Valid"}})
    assert err.value.status == 422


def test_custom_resource_schema_validation_and_pruning(widgets: Any, ns: str) -> None:
    made = widgets.create(body=widget("w", 2, unknown="dropped", free={"kept": 1}), namespace=ns)
    assert made.spec.replicas == 2 and "unknown" not in made.spec.to_dict()
    assert made.spec.free.kept == 1
    for bad, field in (
        (widget("bad", size="huge"), "spec.size"),
        ({**widget("bad2"), "spec": {}}, "spec.replicas"),
    ):
        with pytest.raises(client.ApiException) as err:
            widgets.create(body=bad, namespace=ns)
        assert err.value.status == 422
        assert any(c["field"] == field for c in status_of(err.value)["details"]["causes"])


def test_update_conflict_and_unconditional(core: client.CoreV1Api, ns: str) -> None:
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "u"}, "data": {"a": "1"}})
    cm.data = {"a": "2"}
    updated = core.replace_namespaced_config_map("u", ns, cm)
    assert updated.data == {"a": "2"}
    cm.data = {"a": "3"}  # cm still carries the old resourceVersion
    with pytest.raises(client.ApiException) as err:
        core.replace_namespaced_config_map("u", ns, cm)
    assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"
    cm.metadata.resource_version = None
    assert core.replace_namespaced_config_map("u", ns, cm).data == {"a": "3"}


def test_noop_update_writes_nothing(core: client.CoreV1Api, ns: str) -> None:
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "n"}, "data": {"a": "1"}})
    again = core.replace_namespaced_config_map("n", ns, cm)
    assert again.metadata.resource_version == cm.metadata.resource_version


def test_generation_bumps_only_for_spec(widgets: Any, ns: str) -> None:
    w = widgets.create(body=widget("g", 1), namespace=ns)
    assert w.metadata.generation == 1
    w = widgets.patch(
        name="g",
        namespace=ns,
        body={"metadata": {"labels": {"a": "b"}}},
        content_type="application/merge-patch+json",
    )
    assert w.metadata.generation == 1
    w = widgets.status.patch(
        name="g", namespace=ns, body={"status": {"phase": "Up"}}, content_type="application/merge-patch+json"
    )
    assert w.metadata.generation == 1 and w.status.phase == "Up"
    w = widgets.patch(
        name="g", namespace=ns, body={"spec": {"replicas": 3}}, content_type="application/merge-patch+json"
    )
    assert w.metadata.generation == 2


def test_status_subresource_semantics_for_custom_resources(widgets: Any, ns: str) -> None:
    created = widgets.create(body={**widget("s"), "status": {"phase": "ignored"}}, namespace=ns)
    assert not created.get("status")  # status is dropped on create
    body = created.to_dict()
    body["spec"]["replicas"] = 5
    body["status"] = {"phase": "main-endpoint-ignores-this"}
    after = widgets.replace(body=body, namespace=ns)
    assert after.spec.replicas == 5 and not after.get("status")
    body = after.to_dict()
    body["spec"]["replicas"] = 9
    body["status"] = {"phase": "Running", "replicas": 5}
    after = widgets.status.replace(body=body, namespace=ns)
    assert after.status.phase == "Running" and after.spec.replicas == 5


def test_status_subresource_for_pods_and_nodes(core: client.CoreV1Api, ns: str) -> None:
    p = core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"},
        },
    )
    assert p.status.phase == "Pending"  # reset on create, as the real server does
    p = core.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Running"}, "spec": {"nodeName": "n"}})
    assert p.status.phase == "Running" and p.spec.node_name is None
    p = core.patch_namespaced_pod(
        "p", ns, {"status": {"phase": "Failed"}, "metadata": {"labels": {"a": "b"}}}
    )
    assert p.status.phase == "Running" and p.metadata.labels == {"a": "b"}
    name = unique("node")
    node = core.create_node(
        {"metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    assert node.status.conditions[0].status == "True"
    node = core.patch_node_status(name, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert node.status.conditions[0].status == "False"
    node = core.patch_node(name, {"spec": {"unschedulable": True}, "status": {"phase": "x"}})
    assert node.spec.unschedulable and node.status.phase is None


def test_scale_subresource(widgets: Any, ns: str, session_api: client.ApiClient) -> None:
    widgets.create(body=widget("sc", 2, selector="app=x"), namespace=ns)
    custom = client.CustomObjectsApi(session_api)
    scale = custom.get_namespaced_custom_object_scale(GROUP, "v1", ns, "widgets", "sc")
    assert (
        scale["spec"]["replicas"] == 2 and scale["kind"] == "Scale" and scale["status"]["selector"] == "app=x"
    )
    custom.patch_namespaced_custom_object_scale(GROUP, "v1", ns, "widgets", "sc", {"spec": {"replicas": 4}})
    assert widgets.get(name="sc", namespace=ns).spec.replicas == 4
    scale = custom.get_namespaced_custom_object_scale(GROUP, "v1", ns, "widgets", "sc")
    scale["spec"]["replicas"] = 6
    custom.replace_namespaced_custom_object_scale(GROUP, "v1", ns, "widgets", "sc", scale)
    assert widgets.get(name="sc", namespace=ns).spec.replicas == 6
    with pytest.raises(client.ApiException) as err:
        custom.replace_namespaced_custom_object_scale(GROUP, "v1", ns, "widgets", "sc", scale)  # stale rv
    assert err.value.status == 409


def test_cluster_scoped_custom_resources(session_api: client.ApiClient) -> None:
    from tests.sandbox.apiserver_support import widget_crd

    ext = client.ApiextensionsV1Api(session_api)
    crd = ext.create_custom_resource_definition(widget_crd("gadgets", "Gadget", "Cluster"))
    established = {c.type: c.status for c in crd.status.conditions}
    assert established["Established"] == "True"
    custom = client.CustomObjectsApi(session_api)
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Gadget",
        "metadata": {"name": "g1"},
        "spec": {"replicas": 1},
    }
    made = custom.create_cluster_custom_object(GROUP, "v1", "gadgets", body)
    assert "namespace" not in made["metadata"]
    assert [
        i["metadata"]["name"] for i in custom.list_cluster_custom_object(GROUP, "v1", "gadgets")["items"]
    ] == ["g1"]


def test_dry_run_writes_nothing(core: client.CoreV1Api, ns: str) -> None:
    made = core.create_namespaced_config_map(
        ns, {"metadata": {"name": "dry"}, "data": {"a": "1"}}, dry_run="All"
    )
    assert made.metadata.name == "dry" and made.metadata.uid
    with pytest.raises(client.ApiException) as err:
        core.read_namespaced_config_map("dry", ns)
    assert err.value.status == 404
    core.create_namespaced_config_map(ns, {"metadata": {"name": "wet"}, "data": {"a": "1"}})
    assert core.patch_namespaced_config_map("wet", ns, {"data": {"a": "2"}}, dry_run="All").data == {"a": "2"}
    core.delete_namespaced_config_map("wet", ns, dry_run="All")
    assert core.read_namespaced_config_map("wet", ns).data == {"a": "1"}


def test_invalid_crds_are_rejected(session_api: client.ApiClient) -> None:
    from tests.sandbox.apiserver_support import widget_crd

    ext = client.ApiextensionsV1Api(session_api)
    misnamed = widget_crd("sprockets", "Sprocket")
    misnamed["metadata"]["name"] = "wrong.name.example.com"
    not_structural = widget_crd("cogs", "Cog")
    not_structural["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = {"properties": {"spec": {}}}
    for crd, field in ((misnamed, "metadata.name"), (not_structural, "openAPIV3Schema")):
        with pytest.raises(client.ApiException) as err:
            ext.create_custom_resource_definition(crd)
        causes = status_of(err.value)["details"]["causes"]
        assert err.value.status == 422 and any(field in c["field"] for c in causes), causes
