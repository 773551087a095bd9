"""Where the sandbox used to differ from kube-apiserver (issue 15): deletion bumps generation,
Table lists page with continue tokens, hostile bodies get a 4xx, error bodies keep Status's field
order, strategic merge keys come from the published OpenAPI."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from kubernetes import client

from tests.sandbox.apiserver_support import (
    GROUP,
    raw_request,
    unique,
)

pytestmark = pytest.mark.integration
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@pytest.fixture()
def ns(session_api: client.ApiClient) -> Any:
    name = unique("fid")
    core = client.CoreV1Api(session_api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def test_first_deletion_timestamp_bumps_generation(session_api: client.ApiClient, ns: str) -> None:
    apps = client.AppsV1Api(session_api)
    body = {
        "metadata": {"name": "held", "finalizers": ["example.com/hold"]},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }  # fmt: skip
    assert apps.create_namespaced_deployment(ns, body).metadata.generation == 1
    apps.delete_namespaced_deployment("held", ns)
    held = apps.read_namespaced_deployment("held", ns)
    assert held.metadata.deletion_timestamp is not None and held.metadata.generation == 2
    apps.delete_namespaced_deployment("held", ns)  # a second delete changes nothing
    assert apps.read_namespaced_deployment("held", ns).metadata.generation == 2
    apps.patch_namespaced_deployment("held", ns, {"metadata": {"finalizers": None}})


def test_table_lists_carry_the_continue_token(session_api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(session_api)
    for i in range(7):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{i}"}})
    path = f"/api/v1/namespaces/{ns}/configmaps?limit=3"
    names: list[str] = []
    while True:
        code, page = raw_request(session_api, "GET", path, headers={"Accept": TABLE})
        assert code == 200 and page["kind"] == "Table"
        names.extend(row["cells"][0] for row in page["rows"])
        token = page["metadata"].get("continue")
        if not token:
            break
        path = f"/api/v1/namespaces/{ns}/configmaps?limit=3&continue={token}"
    assert names == [f"cm-{i}" for i in range(7)]


def _nested(depth: int) -> Any:
    doc: Any = "leaf"
    for _ in range(depth):
        doc = {"a": doc}
    return doc


@pytest.mark.parametrize("depth", [200, 900, 2000, 20000])
def test_deeply_nested_bodies_get_a_4xx(session_api: client.ApiClient, ns: str, depth: int) -> None:
    body = {"metadata": {"name": f"deep-{depth}"}, "data": {"x": "y"}, "deep": _nested(depth)}
    raw = json.dumps(body) if depth < 900 else _json_text(body)
    code, status = raw_request(session_api, "POST", f"/api/v1/namespaces/{ns}/configmaps", raw.encode())
    assert 400 <= code < 500, status
    assert status["kind"] == "Status" and status["code"] == code
    patch = ('{"metadata":{"labels":{"a":"b"}},"x":' + '{"a":' * depth + "1" + "}" * depth + "}").encode()
    client.CoreV1Api(session_api).create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{depth}"}})
    code, _ = raw_request(
        session_api,
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/cm-{depth}",
        patch,
        "application/merge-patch+json",
    )
    assert 400 <= code < 500
    yaml_body = (
        "metadata:\n  name: y\n" + "".join("  " * i + "a:\n" for i in range(1, min(depth, 3000))) + "x: 1\n"
    )
    code, _ = raw_request(
        session_api, "POST", f"/api/v1/namespaces/{ns}/configmaps", yaml_body.encode(), "application/yaml"
    )
    assert 400 <= code < 500
    assert client.VersionApi(session_api).get_code().major == "1"  # still serving


def _json_text(doc: Any) -> str:
    """json.dumps without Python's recursion (the stdlib encoder is recursive)."""
    depth = 0
    inner = doc["deep"]
    while isinstance(inner, dict):
        depth += 1
        inner = inner["a"]
    head = json.dumps({k: v for k, v in doc.items() if k != "deep"})[:-1]
    return head + ',"deep":' + '{"a":' * depth + '"leaf"' + "}" * depth + "}"


def test_error_bodies_keep_status_field_order(session_api: client.ApiClient, ns: str) -> None:
    code, body = raw_request(session_api, "GET", f"/api/v1/namespaces/{ns}/configmaps/nope")
    assert code == 404
    assert list(body) == ["kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code"]
    assert list(body["details"]) == ["name", "kind"]
    code, body = raw_request(session_api, "GET", f"/apis/apps/v1/namespaces/{ns}/deployments/nope")
    assert list(body["details"]) == ["name", "group", "kind"]


def test_kubectl_style_apply_patch_keeps_both_service_ports(session_api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(session_api)
    ports = [{"name": "a", "port": 80}, {"name": "b", "port": 81}]
    core.create_namespaced_service(ns, {"metadata": {"name": "two"}, "spec": {"ports": ports}})
    patch = {  # what kubectl apply sends after the manifest's second port changed its targetPort
        "spec": {
            "$setElementOrder/ports": [{"port": 80}, {"port": 81}],
            "ports": [{"port": 81, "targetPort": 9090}],
        }
    }
    svc = core.patch_namespaced_service("two", ns, patch)
    assert [(p.port, p.target_port) for p in svc.spec.ports] == [(80, 80), (81, 9090)]


def test_server_side_apply_through_the_dynamic_client(session_api: client.ApiClient, ns: str) -> None:
    from kubernetes.dynamic import DynamicClient

    cms = DynamicClient(session_api).resources.get(api_version="v1", kind="ConfigMap")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "namespace": ns},
            "data": {"a": "1", "b": "2"}}  # fmt: skip
    created = cms.server_side_apply(body, field_manager="one", namespace=ns)
    assert created.to_dict()["metadata"]["managedFields"][0]["manager"] == "one"
    body["data"] = {"a": "9"}
    with pytest.raises(client.ApiException) as info:
        cms.server_side_apply(body, field_manager="two", namespace=ns)
    status = json.loads(info.value.body)
    assert info.value.status == 409 and status["reason"] == "Conflict"
    assert status["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "one"', "field": ".data.a"}
    ]
    forced = cms.server_side_apply(body, field_manager="two", namespace=ns, force_conflicts=True)
    assert forced.to_dict()["data"] == {"a": "9", "b": "2"}  # "b" stays: "one" still applies it
    code, _ = raw_request(
        session_api, "PATCH", f"/api/v1/namespaces/{ns}/configmaps/ssa", b"{}", "application/apply-patch+yaml"
    )
    assert code == 422  # fieldManager is required


def test_one_event_store_with_both_api_views(session_api: client.ApiClient, ns: str) -> None:
    core, events = client.CoreV1Api(session_api), client.EventsV1Api(session_api)
    events.create_namespaced_event(
        ns,
        {"metadata": {"name": "new-api"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reason": "Scaled",
         "note": "scaled up", "type": "Normal", "action": "Scale", "reportingController": "me",
         "reportingInstance": "me-1", "regarding": {"kind": "Deployment", "name": "web", "namespace": ns}},
    )  # fmt: skip
    core.create_namespaced_event(
        ns,
        {"metadata": {"name": "old-api"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
         "reason": "Pulled", "message": "pulled", "type": "Normal", "count": 3,
         "source": {"component": "kubelet"}, "eventTime": "2026-01-01T00:00:00.000000Z"},
    )  # fmt: skip
    core.create_namespaced_event(
        ns, {"metadata": {"name": "bare"}, "involvedObject": {"kind": "Pod", "name": "p"}}
    )
    code, bare = raw_request(session_api, "GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events/bare")
    assert code == 200 and bare["eventTime"] is None and bare["regarding"] == {"kind": "Pod", "name": "p"}
    core.delete_namespaced_event("bare", ns)
    as_core = {e.metadata.name: e for e in core.list_namespaced_event(ns).items}
    assert (
        as_core["new-api"].message == "scaled up" and as_core["new-api"].involved_object.kind == "Deployment"
    )
    assert as_core["new-api"].reporting_component == "me"
    as_new = {e.metadata.name: e for e in events.list_namespaced_event(ns).items}
    assert as_new["old-api"].note == "pulled" and as_new["old-api"].regarding.name == "p"
    assert (
        as_new["old-api"].deprecated_count == 3 and as_new["old-api"].deprecated_source.component == "kubelet"
    )
    from kubernetes import watch

    streamed = watch.Watch().stream(events.list_namespaced_event, ns, timeout_seconds=1)
    assert {"new-api", "old-api"} <= {e["object"].metadata.name for e in streamed}
    patched = events.patch_namespaced_event("old-api", ns, {"note": "pulled again"})
    assert (
        patched.note == "pulled again" and core.read_namespaced_event("old-api", ns).message == "pulled again"
    )


def test_built_in_bodies_are_decoded_as_kube_decodes_them(session_api: client.ApiClient, ns: str) -> None:
    path = f"/apis/apps/v1/namespaces/{ns}/deployments"
    body: dict[str, Any] = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": "two", "selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }  # fmt: skip
    code, status = raw_request(session_api, "POST", path, json.dumps(body).encode())
    assert code == 400 and status["message"] == (
        'Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal string into '
        "Go struct field DeploymentSpec.spec.replicas of type int32"
    )
    body["spec"]["replicas"] = 1
    body["spec"]["bogus"] = True
    code, status = raw_request(
        session_api, "POST", path + "?fieldValidation=Strict", json.dumps(body).encode()
    )
    assert code == 400 and status["message"] == 'strict decoding error: unknown field "spec.bogus"'
    req = urllib.request.Request(session_api.configuration.host + path + "?fieldValidation=Warn",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req) as resp:
        assert resp.status == 201 and resp.headers.get_all("Warning") == [
            '299 - "unknown field \\"spec.bogus\\""'
        ]
        assert "bogus" not in json.loads(resp.read())["spec"]  # unknown fields are dropped, as decoding does


def test_labels_immutable_config_and_pod_spec(session_api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(session_api)
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "l", "labels": {"bad key": "v"}}})
    assert 'metadata.labels: Invalid value: "bad key"' in json.loads(info.value.body)["message"]
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "frozen"}, "data": {"a": "1"}, "immutable": True}
    )
    with pytest.raises(client.ApiException) as info:
        core.patch_namespaced_config_map("frozen", ns, {"data": {"a": "2"}})
    assert info.value.status == 422
    assert json.loads(info.value.body)["message"] == (
        'ConfigMap "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set'
    )
    core.patch_namespaced_config_map(
        "frozen", ns, {"metadata": {"labels": {"ok": "yes"}}}
    )  # metadata may change
    core.create_namespaced_pod(
        ns, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )
    assert core.patch_namespaced_pod("p", ns, {"spec": {"containers": [{"name": "c", "image": "i:2"}]}})
    with pytest.raises(client.ApiException) as info:
        core.patch_namespaced_pod("p", ns, {"spec": {"restartPolicy": "Never"}})
    assert info.value.status == 422 and "pod updates may not change fields other than" in info.value.body


def test_openapi_documents_carry_schemas(session_api: client.ApiClient, widgets: Any) -> None:
    code, index = raw_request(session_api, "GET", "/openapi/v3")
    assert code == 200 and "?hash=" in index["paths"]["apis/apps/v1"]["serverRelativeURL"]
    code, apps = raw_request(session_api, "GET", "/openapi/v3/apis/apps/v1")
    deployment = apps["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"]
    assert deployment["x-kubernetes-group-version-kind"] == [
        {"group": "apps", "kind": "Deployment", "version": "v1"}
    ]
    spec = apps["components"]["schemas"]["io.k8s.api.apps.v1.DeploymentSpec"]
    assert spec["properties"]["replicas"]["type"] == "integer"
    code, crd_doc = raw_request(session_api, "GET", f"/openapi/v3/apis/{GROUP}/v1")
    widget = crd_doc["components"]["schemas"][".".join(reversed(GROUP.split("."))) + ".v1.Widget"]
    assert "replicas" in widget["properties"]["spec"]["properties"]
    code, v2 = raw_request(session_api, "GET", "/openapi/v2", headers={"Accept": "application/json"})
    assert code == 200 and "io.k8s.api.core.v1.Pod" in v2["definitions"]
    assert v2["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]["items"] == {
        "$ref": "#/definitions/io.k8s.api.core.v1.Container"
    }
