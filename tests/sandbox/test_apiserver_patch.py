"""PATCH by Content-Type: merge, JSON and strategic merge patches, and resourceVersion preconditions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from tests.sandbox.apiserver_support import (
    raw_request,
    status_of,
    unique,
    widget,
)

pytestmark = pytest.mark.integration


def _raw_patch(api: client.ApiClient, path: str, body: Any, content_type: str) -> tuple[int, Any]:
    """PATCH with an explicit Content-Type (the typed client picks one itself)."""
    return raw_request(api, "PATCH", path, json.dumps(body).encode(), content_type)


def test_json_merge_patch_removes_with_null(widgets: Any, ns: str) -> None:
    widgets.create(body=widget("m", 1, free={"a": 1, "b": 2}), namespace=ns)
    out = widgets.patch(
        name="m",
        namespace=ns,
        body={"spec": {"free": {"a": None, "c": 3}}},
        content_type="application/merge-patch+json",
    )
    assert out.spec.free.to_dict() == {"b": 2, "c": 3}


def test_json_patch_with_test_op(kube_api: client.ApiClient, core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "j"}, "data": {"a": "1"}})
    path = f"/api/v1/namespaces/{ns}/configmaps/j"
    ops = [{"op": "test", "path": "/data/a", "value": "1"}, {"op": "add", "path": "/data/b", "value": "2"}]
    code, body = _raw_patch(kube_api, path, ops, "application/json-patch+json")
    assert code == 200 and body["data"] == {"a": "1", "b": "2"}
    code, body = _raw_patch(
        kube_api, path, [{"op": "test", "path": "/data/a", "value": "nope"}], "application/json-patch+json"
    )
    assert code == 422 and body["kind"] == "Status"
    assert core.read_namespaced_config_map("j", ns).data == {"a": "1", "b": "2"}


def test_strategic_merge_patch_merges_keyed_lists(core: client.CoreV1Api) -> None:
    name = unique("node")
    core.create_node(
        {
            "metadata": {"name": name, "finalizers": ["a/x"]},
            "spec": {"taints": [{"key": "k1", "effect": "NoSchedule"}]},
        }
    )
    node = core.patch_node(
        name,
        {"metadata": {"finalizers": ["b/y"]}, "spec": {"taints": [{"key": "k2", "effect": "NoExecute"}]}},
    )
    assert sorted(node.metadata.finalizers) == ["a/x", "b/y"]
    assert [t.key for t in node.spec.taints] == ["k2"]  # taints are atomic upstream: replaced whole
    node = core.patch_node(name, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x"]}})
    assert node.metadata.finalizers == ["b/y"]
    node = core.patch_node_status(
        name,
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            }
        },
    )
    node = core.patch_node_status(
        name,
        {
            "status": {
                "conditions": [{"type": "DiskPressure", "status": "False"}],
                "addresses": [{"type": "Hostname", "address": "h"}],
            }
        },
    )
    assert sorted(c.type for c in node.status.conditions) == ["DiskPressure", "Ready"]
    assert sorted(a.type for a in node.status.addresses) == ["Hostname", "InternalIP"]
    node = core.patch_node_status(name, {"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}})
    assert [c.type for c in node.status.conditions] == ["DiskPressure"]


def test_strategic_merge_patch_retain_keys_and_replace(core: client.CoreV1Api, ns: str) -> None:
    # a PodTemplate: a Pod's spec is immutable upstream beyond images, so these patches need a template
    core.create_namespaced_pod_template(
        ns,
        {
            "metadata": {"name": "p"},
            "template": {
                "spec": {"containers": [{"name": "a", "image": "one"}, {"name": "b", "image": "two"}]}
            },
        },
    )

    def patch(body: dict[str, Any]) -> Any:
        return core.patch_namespaced_pod_template("p", ns, body).template

    p = patch({"template": {"spec": {"containers": [{"name": "a", "image": "uno"}]}}})
    assert [(c.name, c.image) for c in p.spec.containers] == [("a", "uno"), ("b", "two")]
    p = patch({"template": {"metadata": {"labels": {"$patch": "replace", "only": "me"}}}})
    assert p.metadata.labels == {"only": "me"}
    p = patch({"template": {"spec": {"containers": [{"name": "b", "$patch": "delete"}]}}})
    assert [c.name for c in p.spec.containers] == ["a"]
    p = patch({"template": {"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}})
    p = patch(
        {
            "template": {
                "spec": {
                    "volumes": [
                        {"name": "v", "hostPath": {"path": "/x"}, "$retainKeys": ["name", "hostPath"]}
                    ]
                }
            }
        }
    )
    assert p.spec.volumes[0].host_path.path == "/x" and p.spec.volumes[0].empty_dir is None


def test_strategic_merge_patch_refused_for_custom_resources(
    kube_api: client.ApiClient, widgets: Any, ns: str
) -> None:
    from tests.sandbox.apiserver_support import GROUP

    widgets.create(body=widget("s"), namespace=ns)
    code, body = _raw_patch(
        kube_api,
        f"/apis/{GROUP}/v1/namespaces/{ns}/widgets/s",
        {"spec": {"replicas": 2}},
        "application/strategic-merge-patch+json",
    )
    assert code == 415 and body["reason"] == "UnsupportedMediaType"


def test_unknown_patch_types_are_415(kube_api: client.ApiClient, core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    code, body = _raw_patch(kube_api, f"/api/v1/namespaces/{ns}/configmaps/a", {"data": {}}, "text/plain")
    assert code == 415 and body["reason"] == "UnsupportedMediaType"


def test_resource_version_in_patch_is_a_precondition(core: client.CoreV1Api, ns: str) -> None:
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "rv"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map("rv", ns, {"data": {"a": "2"}})
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_config_map(
            "rv", ns, {"metadata": {"resourceVersion": cm.metadata.resource_version}, "data": {"a": "3"}}
        )
    assert err.value.status == 409
    current = core.read_namespaced_config_map("rv", ns)
    patched = core.patch_namespaced_config_map(
        "rv", ns, {"metadata": {"resourceVersion": current.metadata.resource_version}, "data": {"a": "4"}}
    )
    assert patched.data == {"a": "4"}


def test_patch_of_missing_object_is_404(core: client.CoreV1Api, ns: str) -> None:
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_config_map("missing", ns, {"data": {}})
    assert err.value.status == 404 and status_of(err.value)["reason"] == "NotFound"
