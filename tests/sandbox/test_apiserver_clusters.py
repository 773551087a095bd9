"""Virtual clusters: one sandbox API-server process serving a root cluster and several virtual ones
(``mcm_sandbox/apiserver/clusters.py``), each with its own objects, resourceVersions, watches,
CRDs, fault rules and token, reached through the official client, kubectl and raw HTTP."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch
from urllib3.exceptions import ProtocolError

from mcm_sandbox.procs import ApiServer, wait_until
from tests.sandbox.apiserver_support import (
    GROUP,
    kubectl_binary,
    unique,
    widget,
    widget_crd,
)

pytestmark = pytest.mark.integration

WAIT = 15.0


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """One process: the root cluster and the virtual clusters ``a`` and ``b``."""
    server = ApiServer(
        tmp_path_factory.mktemp("clusters"),
        name="host",
        extra_args=["--virtual-cluster", "a", "--virtual-cluster", "b", "--bookmark-interval", "1"],
    ).start()
    yield server
    server.stop()


def connect(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture(name="a")
def a_fixture(host: ApiServer) -> Iterator[client.ApiClient]:
    api = connect(host.cluster_kubeconfig("a"))
    yield api
    api.close()


@pytest.fixture(name="b")
def b_fixture(host: ApiServer) -> Iterator[client.ApiClient]:
    api = connect(host.cluster_kubeconfig("b"))
    yield api
    api.close()


@pytest.fixture(name="root")
def root_fixture(host: ApiServer) -> Iterator[client.ApiClient]:
    api = connect(host.kubeconfig)
    yield api
    api.close()


def kubeconfig_of(path: Path) -> tuple[str, str, bytes]:
    """Server URL, token and CA of a kubeconfig the sandbox wrote."""
    doc = yaml.safe_load(path.read_text())
    cluster = doc["clusters"][0]["cluster"]
    ca = base64.b64decode(cluster.get("certificate-authority-data", ""))
    return cluster["server"], doc["users"][0]["user"].get("token", ""), ca


def http(url: str, token: str, ca: bytes, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cadata=ca.decode()) if ca else None
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": data}


# --- isolation -----------------------------------------------------------------------------------


def test_each_cluster_has_its_own_objects(
    a: client.ApiClient, b: client.ApiClient, root: client.ApiClient
) -> None:
    ns = unique("iso")
    core_a, core_b, core_root = client.CoreV1Api(a), client.CoreV1Api(b), client.CoreV1Api(root)
    core_a.create_namespace({"metadata": {"name": ns}})
    core_a.create_namespaced_config_map(ns, configmap("cm", where="a"))
    for other in (core_b, core_root):
        with pytest.raises(client.ApiException) as missing:
            other.read_namespace(ns)
        assert missing.value.status == 404
    core_b.create_namespace({"metadata": {"name": ns}})  # the same name is free in another cluster
    core_b.create_namespaced_config_map(ns, configmap("cm", where="b"))
    assert core_a.read_namespaced_config_map("cm", ns).data == {"where": "a"}
    assert core_b.read_namespaced_config_map("cm", ns).data == {"where": "b"}
    core_a.delete_namespaced_config_map("cm", ns)
    assert core_b.read_namespaced_config_map("cm", ns).data == {"where": "b"}


def test_each_cluster_counts_its_own_resource_versions(a: client.ApiClient, b: client.ApiClient) -> None:
    core_a, core_b = client.CoreV1Api(a), client.CoreV1Api(b)
    before_b = core_b.list_namespace().metadata.resource_version
    before_a = core_a.list_namespace().metadata.resource_version
    for _ in range(3):
        core_a.create_namespace({"metadata": {"name": unique("rv")}})
    assert int(core_a.list_namespace().metadata.resource_version) >= int(before_a) + 3
    assert core_b.list_namespace().metadata.resource_version == before_b


def test_a_watch_sees_only_its_own_cluster(a: client.ApiClient, b: client.ApiClient) -> None:
    core_a, core_b = client.CoreV1Api(a), client.CoreV1Api(b)
    ns = unique("watch")
    core_a.create_namespace({"metadata": {"name": ns}})
    core_b.create_namespace({"metadata": {"name": ns}})
    since = core_b.list_namespaced_config_map(ns).metadata.resource_version
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def follow() -> None:
        w = watch.Watch()
        for event in w.stream(
            core_b.list_namespaced_config_map, ns, resource_version=since, timeout_seconds=int(WAIT)
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if event["object"].metadata.name == "in-b":
                w.stop()
        done.set()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    core_a.create_namespaced_config_map(ns, configmap("in-a"))
    core_b.create_namespaced_config_map(ns, configmap("in-b"))
    wait_until(done.is_set, WAIT, what="b's watch to see b's configmap")
    assert seen == [("ADDED", "in-b")]


def test_crds_are_per_cluster(a: client.ApiClient, b: client.ApiClient, tmp_path: Path) -> None:
    client.ApiextensionsV1Api(a).create_custom_resource_definition(widget_crd())
    custom_a, custom_b = client.CustomObjectsApi(a), client.CustomObjectsApi(b)

    def served() -> bool:
        try:
            custom_a.create_namespaced_custom_object(GROUP, "v1", "default", "widgets", widget(unique("w")))
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    wait_until(served, WAIT, what="widgets served in a")
    with pytest.raises(client.ApiException) as missing:
        custom_b.list_namespaced_custom_object(GROUP, "v1", "default", "widgets")
    assert missing.value.status == 404
    groups = [g.name for g in client.ApisApi(b).get_api_versions().groups]
    assert GROUP not in groups


def test_a_token_opens_only_its_own_cluster(host: ApiServer) -> None:
    url_a, token_a, ca = kubeconfig_of(host.cluster_kubeconfig("a"))
    url_b, token_b, _ = kubeconfig_of(host.cluster_kubeconfig("b"))
    url_root, token_root, _ = kubeconfig_of(host.kubeconfig)
    assert len({token_a, token_b, token_root}) == 3 and all((token_a, token_b, token_root))
    assert http(f"{url_a}/api/v1/namespaces", token_a, ca)[0] == 200
    for url, token in (
        (url_b, token_a),
        (url_a, token_b),
        (url_a, token_root),
        (url_root, token_a),
        (url_a, ""),
    ):
        code, body = http(f"{url}/api/v1/namespaces", token, ca)
        assert code == 401 and body["reason"] == "Unauthorized", (url, code)


def test_service_account_tokens_are_signed_per_cluster(host: ApiServer, a: client.ApiClient) -> None:
    core_a = client.CoreV1Api(a)
    core_a.create_namespaced_service_account("default", {"metadata": {"name": "probe"}})
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    token = core_a.create_namespaced_service_account_token("probe", "default", request).status.token
    url_a, _, ca = kubeconfig_of(host.cluster_kubeconfig("a"))
    url_b, _, _ = kubeconfig_of(host.cluster_kubeconfig("b"))
    assert http(f"{url_a}/api/v1/namespaces", token, ca)[0] == 200
    assert http(f"{url_b}/api/v1/namespaces", token, ca)[0] == 401


def test_fault_rules_are_per_cluster(host: ApiServer, a: client.ApiClient, b: client.ApiClient) -> None:
    url_a, token_a, ca = kubeconfig_of(host.cluster_kubeconfig("a"))
    rule = {"action": "error", "status_code": 503, "resources": ["configmaps"]}
    code, created = http(f"{url_a}/sandbox/faults", token_a, ca, "POST", rule)
    assert code == 201
    try:
        with pytest.raises(client.ApiException) as failed:
            client.CoreV1Api(a).list_namespaced_config_map("default")
        assert failed.value.status == 503
        client.CoreV1Api(b).list_namespaced_config_map("default")  # b's API server is up
    finally:
        http(f"{url_a}/sandbox/faults/{created['id']}", token_a, ca, "DELETE")
    client.CoreV1Api(a).list_namespaced_config_map("default")


def test_each_cluster_publishes_its_kubernetes_service(a: client.ApiClient) -> None:
    service = client.CoreV1Api(a).read_namespaced_service("kubernetes", "default")
    assert service.spec.ports[0].port == 443


# --- clients -------------------------------------------------------------------------------------


def test_kubectl_against_a_virtual_cluster(host: ApiServer, tmp_path: Path) -> None:
    import subprocess

    ns = unique("kubectl")
    base = [kubectl_binary(), "--kubeconfig", str(host.cluster_kubeconfig("b")), "--cache-dir", str(tmp_path)]
    created = subprocess.run([*base, "create", "namespace", ns], capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    listed = subprocess.run(
        [*base, "get", "namespaces", "-o", "name"], capture_output=True, text=True, timeout=60
    )
    assert f"namespace/{ns}" in listed.stdout.split()


def test_the_dynamic_client_discovers_each_cluster(
    a: client.ApiClient, b: client.ApiClient, tmp_path: Path
) -> None:
    from kubernetes.dynamic import DynamicClient

    ns = unique("dyn")
    for api, cache in ((a, "a.json"), (b, "b.json")):
        dyn = DynamicClient(api, cache_file=str(tmp_path / cache))
        namespaces = dyn.resources.get(api_version="v1", kind="Namespace")
        namespaces.create(body={"metadata": {"name": ns}})
        assert ns in [item.metadata.name for item in namespaces.get().items]


# --- clusters at run time ------------------------------------------------------------------------


def test_a_cluster_added_at_run_time_serves_and_removal_ends_it(host: ApiServer) -> None:
    name = unique("rt")
    path = host.add_cluster(name)
    api = connect(path)
    try:
        core = client.CoreV1Api(api)
        assert "default" in [n.metadata.name for n in core.list_namespace().items]
        since = core.list_namespace().metadata.resource_version
        ended, opened = threading.Event(), threading.Event()

        def follow() -> None:  # one watch request, read to its end (no client-side re-watch)
            resp = core.list_namespace(
                watch=True, resource_version=since, timeout_seconds=int(WAIT) * 2, _preload_content=False
            )
            opened.set()
            try:
                for _ in resp.stream():
                    pass
            except ProtocolError:  # cut, as a watch on a server that went away is
                pass
            ended.set()

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        # removed before the watch was open, the request would wait out its own timeout instead
        wait_until(opened.is_set, WAIT, what="the watch to be open")
        host.remove_cluster(name)
        wait_until(ended.is_set, WAIT, what="the removed cluster's watch to end")
        with pytest.raises(client.ApiException) as gone:
            core.list_namespace()
        assert gone.value.status in (401, 404)
        assert not path.exists()
    finally:
        api.close()


def test_the_admin_endpoint_needs_the_root_credential_and_checks_names(host: ApiServer) -> None:
    url = host.url
    _, token_root, _ = kubeconfig_of(host.kubeconfig)
    _, token_a, _ = kubeconfig_of(host.cluster_kubeconfig("a"))
    assert http(f"{url}/sandbox/clusters", "", b"")[0] == 401
    assert http(f"{url}/sandbox/clusters", token_a, b"")[0] == 401
    code, listed = http(f"{url}/sandbox/clusters", token_root, b"")
    assert code == 200 and {"a", "b"} <= {c["name"] for c in listed["items"]}
    assert all("token" not in c for c in listed["items"])
    assert http(f"{url}/sandbox/clusters", token_root, b"", "POST", {"name": "Not_A_Label"})[0] == 400
    assert http(f"{url}/sandbox/clusters", token_root, b"", "POST", {"name": "a"})[0] == 409
    assert http(f"{url}/sandbox/clusters", token_root, b"", "POST", ["a"])[0] == 400
    code, status = http(f"{url}/sandbox/clusters/nope", token_root, b"", "DELETE")
    assert code == 404 and status["reason"] == "NotFound"
    assert http(f"{url}/clusters/nope/api", token_root, b"")[0] == 404


def test_rbac_mode_gives_every_cluster_its_own_roles(own_server: Any) -> None:
    server, root = own_server("--authorization-mode", "RBAC", "--virtual-cluster", "a", name="rbac-host")
    api_a = connect(server.cluster_kubeconfig("a"))
    try:
        core_a = client.CoreV1Api(api_a)
        core_a.create_namespaced_service_account("default", {"metadata": {"name": "nobody"}})
        request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
        token = core_a.create_namespaced_service_account_token("nobody", "default", request).status.token
    finally:
        api_a.close()
    url_a, _, ca = kubeconfig_of(server.cluster_kubeconfig("a"))
    code, status = http(f"{url_a}/api/v1/namespaces/default/pods", token, ca)
    assert code == 403 and "system:serviceaccount:default:nobody" in status["message"]
    url_root, _, ca_root = kubeconfig_of(server.kubeconfig)
    assert http(f"{url_root}/api/v1/namespaces", token, ca_root)[0] == 401
    core_root = client.CoreV1Api(root)
    core_root.create_namespaced_service_account("default", {"metadata": {"name": "tenant"}})
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    tenant = core_root.create_namespaced_service_account_token("tenant", "default", request).status.token
    code, status = http(f"{server.url}/sandbox/clusters", tenant, b"", "POST", {"name": "mine"})
    assert code == 403 and "system:masters" in status["message"]
