"""The protocol edges: discovery, Table output, error Status objects, bad input, authentication."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.dynamic import DynamicClient

from mcm_sandbox.procs import ApiServer
from tests.sandbox.apiserver_support import (
    GROUP,
    raw_request,
    widget,
)

pytestmark = pytest.mark.integration
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
REPO = Path(__file__).resolve().parents[2]


def test_discovery_documents(kube_api: client.ApiClient) -> None:
    assert "v1" in client.CoreApi(kube_api).get_api_versions().versions
    groups = {g.name: g for g in client.ApisApi(kube_api).get_api_versions().groups}
    for group in ("policy", "storage.k8s.io", "coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"):
        assert groups[group].preferred_version.version == "v1"
    resources = {r.name: r for r in client.CoreV1Api(kube_api).get_api_resources().resources}
    assert resources["pods"].namespaced and "po" in resources["pods"].short_names
    assert {"pods/status", "pods/eviction", "nodes/status", "namespaces/finalize"} <= set(resources)
    assert not resources["nodes"].namespaced and "watch" in resources["nodes"].verbs
    assert client.VersionApi(kube_api).get_code().major == "1"
    for path in ("/healthz", "/livez", "/readyz"):
        assert (
            kube_api.rest_client.pool_manager.request("GET", kube_api.configuration.host + path).status == 200
        )


def test_dynamic_client_discovers_crd_resources(
    widgets: Any, session_api: client.ApiClient, tmp_path: Path
) -> None:
    dyn = DynamicClient(session_api, cache_file=str(tmp_path / "c.json"))
    res = dyn.resources.get(api_version=f"{GROUP}/v1", kind="Widget")
    assert res.namespaced and res.short_names == ["wid"] and res.subresources.keys() >= {"status", "scale"}
    assert dyn.resources.get(api_version="v1", kind="Pod").subresources.keys() >= {"status", "eviction"}


def test_table_output_uses_printer_columns(kube_api: client.ApiClient, widgets: Any, ns: str) -> None:
    widgets.create(body=widget("t1", 3), namespace=ns)
    code, body = raw_request(
        kube_api, "GET", f"/apis/{GROUP}/v1/namespaces/{ns}/widgets", headers={"Accept": TABLE}
    )
    assert code == 200 and body["kind"] == "Table"
    assert [c["name"] for c in body["columnDefinitions"]] == ["Name", "Replicas", "Phase", "Age"]
    cells = body["rows"][0]["cells"]
    assert cells[:3] == ["t1", 3, None] and cells[3].endswith("s")
    assert body["rows"][0]["object"]["metadata"]["name"] == "t1"
    code, body = raw_request(kube_api, "GET", f"/api/v1/namespaces/{ns}/pods/nope", headers={"Accept": TABLE})
    assert code == 404
    client.CoreV1Api(kube_api).create_namespaced_pod(
        ns, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    )
    code, body = raw_request(kube_api, "GET", f"/api/v1/namespaces/{ns}/pods/p", headers={"Accept": TABLE})
    assert [c["name"] for c in body["columnDefinitions"]][:5] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert body["rows"][0]["cells"][:3] == ["p", "0/1", "Pending"]
    code, body = raw_request(kube_api, "GET", f"/api/v1/namespaces/{ns}/pods")
    assert body["kind"] == "PodList"  # JSON unless a Table is asked for


def test_watch_as_table(kube_api: client.ApiClient, core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"k": "v"}})
    url = f"{kube_api.configuration.host}/api/v1/namespaces/{ns}/configmaps?watch=true&timeoutSeconds=1"
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": TABLE}), timeout=10) as resp:
        events = [json.loads(line) for line in resp.read().splitlines()]
    table = events[0]["object"]
    assert events[0]["type"] == "ADDED" and table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert table["rows"][0]["cells"][:2] == ["a", 1]


def test_error_statuses(kube_api: client.ApiClient, core: client.CoreV1Api, ns: str) -> None:
    base = f"/api/v1/namespaces/{ns}/configmaps"
    cases: list[tuple[str, str, bytes | None, str, int, str]] = [
        ("GET", "/api/v1/nosuchthings", None, "application/json", 404, "NotFound"),
        ("GET", "/apis/nosuch.group/v1/things", None, "application/json", 404, "NotFound"),
        ("POST", base, b"{not json", "application/json", 400, "BadRequest"),
        ("POST", base, b'{"metadata": {"name": "x"}}', "text/plain", 415, "UnsupportedMediaType"),
        (
            "POST",
            base,
            b"{" + b'"a": "' + b"x" * (3 * 1024 * 1024 + 10) + b'"}',
            "application/json",
            413,
            "RequestEntityTooLarge",
        ),
        ("PUT", base, b"{}", "application/json", 405, "MethodNotAllowed"),
        (
            "POST",
            "/api/v1/configmaps",
            b'{"metadata": {"name": "x"}}',
            "application/json",
            405,
            "MethodNotAllowed",
        ),
        (
            "POST",
            base,
            b'{"kind": "Secret", "metadata": {"name": "x"}}',
            "application/json",
            400,
            "BadRequest",
        ),
    ]
    for method, path, data, ctype, code, reason in cases:
        got, body = raw_request(kube_api, method, path, data, ctype)
        assert (got, body["kind"], body["reason"], body["code"]) == (code, "Status", reason, code), (
            method,
            path,
        )
    with pytest.raises(client.ApiException) as err:
        core.read_namespaced_config_map("missing", ns)
    assert err.value.status == 404 and json.loads(err.value.body)["details"]["name"] == "missing"


def test_bearer_token_required_when_configured(own_server: Any) -> None:
    server, api = own_server("--token", "s3cret", name="secure")
    assert client.CoreV1Api(api).list_namespace().items  # the kubeconfig carries the token
    anonymous = client.ApiClient(client.Configuration(host=server.url))
    with pytest.raises(client.ApiException) as err:
        client.CoreV1Api(anonymous).list_namespace()
    assert err.value.status == 401
    kubeconfig = yaml.safe_load(server.kubeconfig.read_text())
    assert kubeconfig["users"][0]["user"]["token"] == "s3cret"
    assert kubeconfig["clusters"][0]["cluster"]["server"] == server.url


def test_two_instances_are_independent(own_server: Any) -> None:
    _, control = own_server(name="control")
    _, target = own_server(name="target")
    client.CoreV1Api(control).create_namespaced_config_map("default", {"metadata": {"name": "only-here"}})
    assert not client.CoreV1Api(target).list_namespaced_config_map("default").items
    assert {n.metadata.name for n in client.CoreV1Api(target).list_namespace().items} >= {
        "default",
        "kube-system",
    }


def test_concurrent_writers_never_lose_an_update(
    core: client.CoreV1Api, ns: str, apiserver: ApiServer
) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "counter"}, "data": {"n": "0"}})
    apis = [
        client.CoreV1Api(config.new_client_from_config(config_file=str(apiserver.kubeconfig)))
        for _ in range(4)
    ]

    def bump(api: client.CoreV1Api) -> None:
        for _ in range(10):
            while True:
                cm = api.read_namespaced_config_map("counter", ns)
                cm.data["n"] = str(int(cm.data["n"]) + 1)
                try:
                    api.replace_namespaced_config_map("counter", ns, cm)
                    break
                except client.ApiException as exc:
                    assert exc.status == 409

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(bump, apis))
    assert core.read_namespaced_config_map("counter", ns).data["n"] == "40"


@pytest.mark.skipif(not sorted((REPO / "crds").glob("*.yaml")), reason="no generated CRDs in crds/")
def test_project_crds_register_and_serve(own_server: Any) -> None:
    _, api = own_server(name="crds")
    ext = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    for path in sorted((REPO / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        made = ext.create_custom_resource_definition(crd)
        assert {c.type: c.status for c in made.status.conditions}["Established"] == "True"
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("storage"))
        listed = custom.list_namespaced_custom_object(
            spec["group"], version, "default", spec["names"]["plural"]
        )
        assert listed["items"] == []
