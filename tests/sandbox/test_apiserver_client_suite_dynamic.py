"""The kubernetes-client/python dynamic client's own e2e tests (``kubernetes/dynamic/test_client.py``
and ``test_discovery.py``, shipped in the installed package), ported against the sandbox.

Each upstream test -> ours:

    TestDynamicClient
      test_cluster_custom_resources          -> test_custom_resources[Cluster]
      test_namespaced_custom_resources       -> test_custom_resources[Namespaced]
      test_async_namespaced_custom_resources -> test_custom_resources[Namespaced-async]
          (upstream still creates its CRD through apiextensions.k8s.io/v1beta1, which kube-apiserver
          stopped serving in 1.22; ours uses v1 and checks v1beta1 is absent, as on a real cluster)
      test_service_apis                      -> test_service_strategic_patch_keeps_both_ports
      test_replication_controller_apis       -> test_replication_controller
      test_configmap_apis                    -> test_configmap_get_watch_patch_delete
      test_node_apis                         -> test_node_labels
      test_node_apis_partial_object_metadata -> test_partial_object_metadata_list
      test_server_side_apply_api             -> test_server_side_apply_dry_run
    (ours, beside them)                    -> test_metadata_only_get_list_and_watch (what client-go's
                                              metadata client sends, and the 406s)
    TestDynamicClientSerialization (3 tests) -> not ported: client-side serialization, no request
    test_discovery.py
      test_init_cache_from_file              -> test_discovery_cache_file_is_reused
      test_cache_decoder_resource_and_subresource -> test_discovery_cache_round_trip (compares
          to_dict() as upstream's asyncio twin does: the sync one compares two Resource objects with
          ``==``, which is identity, and fails on a real cluster too)
"""

from __future__ import annotations

import json
import os
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from mcm_sandbox.procs import wait_until
from tests.sandbox.apiserver_support import raw_request
from tests.sandbox.client_suite import wait_gone

pytestmark = pytest.mark.integration

DEFAULT = "default"
GROUP = "apps.example.com"
JSON = "application/json"


def short_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(name="dyn")
def dyn_fixture(suite_api: client.ApiClient, tmp_path: Path) -> DynamicClient:
    return DynamicClient(suite_api, cache_file=str(tmp_path / "discovery.json"))


def changeme_crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    spec = {"type": "object", "properties": {"size": {"type": "integer"}}}
    schema = {"type": "object", "properties": {"spec": spec}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": schema}, "subresources": {"status": {}}}],
        },
    }  # fmt: skip


def discovered(dyn: DynamicClient, kind: str) -> Any:
    """The resource once discovery lists it (a new CRD's group appears after it is Established)."""
    found: list[Any] = []

    def look() -> bool:
        try:
            found.append(dyn.resources.get(api_version=f"{GROUP}/v1", kind=kind))
        except ResourceNotFoundError:
            dyn.resources.invalidate_cache()
            return False
        return True

    wait_until(look, 15, what=f"{kind} discovered")
    return found[-1]


@pytest.mark.parametrize(
    "scope,use_async",
    [("Cluster", False), ("Namespaced", False), ("Namespaced", True)],
    ids=["Cluster", "Namespaced", "Namespaced-async"],
)
def test_custom_resources(dyn: DynamicClient, scope: str, use_async: bool) -> None:
    kind = ("Cluster" if scope == "Cluster" else "") + "ChangeMe"
    plural = kind.lower() + "s"
    with pytest.raises(ResourceNotFoundError):
        dyn.resources.get(api_version=f"{GROUP}/v1", kind=kind)
    with pytest.raises(ResourceNotFoundError):
        dyn.resources.get(api_version="apiextensions.k8s.io/v1beta1", kind="CustomResourceDefinition")
    crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    extra: dict[str, Any] = {"async_req": True} if use_async else {}
    ns: dict[str, Any] = {"namespace": DEFAULT} if scope == "Namespaced" else {}

    def call(method: Any, **kwargs: Any) -> Any:
        return method(**kwargs, **extra)  # the dynamic client resolves async_req itself

    crd_name = f"{plural}.{GROUP}"
    made = call(crds.create, body=changeme_crd(kind, plural, scope))
    assert made.metadata.name == crd_name and made.status
    assert call(crds.get, name=crd_name).status
    api = discovered(dyn, kind)
    assert call(api.get).items == []
    name = short_name("custom-resource")
    body: dict[str, Any] = {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": name}, "spec": {}}
    assert call(api.create, body=body, **ns).metadata.name == name
    assert call(api.get, name=name, **ns).metadata.name == name
    body["spec"]["size"] = 3
    patched = call(api.patch, body=body, content_type="application/merge-patch+json", **ns)
    assert patched.spec.size == 3 and call(api.get, name=name, **ns).spec.size == 3
    assert len(call(api.get, **ns).items) == 1 and len(call(api.get).items) == 1  # all namespaces too
    call(api.delete, name=name, **ns)
    assert call(api.get, **ns).items == [] and call(api.get).items == []
    call(crds.delete, name=crd_name)
    wait_gone(client.ApiextensionsV1Api(dyn.client).read_custom_resource_definition, crd_name)
    dyn.resources.invalidate_cache()
    with pytest.raises(ResourceNotFoundError):
        dyn.resources.get(api_version=f"{GROUP}/v1", kind=kind)


def test_service_strategic_patch_keeps_both_ports(dyn: DynamicClient) -> None:
    """The dynamic client patches strategically by default; an unknown field (a lower-case
    ``resourceversion``, as upstream's manifest has) is dropped with a warning, not refused."""
    api = dyn.resources.get(api_version="v1", kind="Service")
    name = short_name("frontend")
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {"name": name}, "resourceversion": "v1"},
        "spec": {"selector": {"name": name},
                 "ports": [{"name": "port", "port": 80, "protocol": "TCP", "targetPort": 80}]},
    }  # fmt: skip
    made = api.create(body=manifest, namespace=DEFAULT)
    assert made.metadata.name == name and made.status
    assert api.get(name=name, namespace=DEFAULT).status
    manifest["spec"]["ports"] = [{"name": "new", "port": 8080, "protocol": "TCP", "targetPort": 8080}]
    patched = api.patch(body=manifest, name=name, namespace=DEFAULT)
    assert len(patched.spec.ports) == 2 and patched.status
    deleted = api.delete(name=name, body={}, namespace=DEFAULT)
    assert deleted.kind == "Service" and deleted.metadata.name == name


def test_replication_controller(dyn: DynamicClient) -> None:
    api = dyn.resources.get(api_version="v1", kind="ReplicationController")
    name = short_name("frontend")
    template = {"metadata": {"labels": {"name": name}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx",
                                         "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}}  # fmt: skip
    body = {"apiVersion": "v1", "kind": "ReplicationController",
            "metadata": {"name": name, "labels": {"name": name}},
            "spec": {"replicas": 2, "selector": {"name": name}, "template": template}}  # fmt: skip
    assert api.create(body=body, namespace=DEFAULT).spec.replicas == 2
    assert api.get(name=name, namespace=DEFAULT).spec.replicas == 2
    status = api.delete(name=name, namespace=DEFAULT, propagation_policy="Background")
    assert status.kind == "Status" and status.status == "Success"


def test_configmap_get_watch_patch_delete(dyn: DynamicClient) -> None:
    api = dyn.resources.get(api_version="v1", kind="ConfigMap")
    name = short_name("test-configmap")
    body: dict[str, Any] = {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": {"e2e-test": "true"}},
        "data": {
            "config.json": '{"command":"/usr/bin/mysqld_safe"}',
            "frontend.cnf": "[mysqld]\nbind-address = 10.0.0.3\n",
        },
    }
    assert api.create(body=body, namespace=DEFAULT).metadata.name == name
    # a get by name ignores the label selector, as kube-apiserver does for a GET of one object
    assert api.get(name=name, namespace=DEFAULT, label_selector="e2e-test=true").metadata.name == name
    events = list(dyn.watch(api, timeout=1, namespace=DEFAULT, name=name))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", name)]
    body["data"]["config.json"] = "{}"
    assert api.patch(name=name, namespace=DEFAULT, body=body).data["config.json"] == "{}"
    assert api.delete(name=name, body={}, namespace=DEFAULT).status == "Success"
    assert api.get(namespace=DEFAULT, pretty=True, label_selector="e2e-test=true").items == []


def test_node_labels(dyn: DynamicClient) -> None:
    api = dyn.resources.get(api_version="v1", kind="Node")
    name = short_name("node")
    api.create(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
                     "labels": {"kubernetes.io/hostname": name}}})  # fmt: skip
    for item in api.get().items:
        assert len(dict(api.get(name=item.metadata.name).metadata.labels)) > 0
    api.delete(name=name)


@pytest.mark.parametrize("header", ["Accept", "aCcePt"])
def test_partial_object_metadata_list(dyn: DynamicClient, header: str) -> None:
    api = dyn.resources.get(api_version="v1", kind="Node")
    name = short_name("node")
    api.create(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"a": "b"}}})
    accept = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
    listed = api.get(header_params={header: accept})
    assert (listed.kind, listed.apiVersion) == ("PartialObjectMetadataList", "meta.k8s.io/v1")
    (item,) = [i for i in listed.items if i.metadata.name == name]
    assert (item.kind, item.apiVersion) == ("PartialObjectMetadata", "meta.k8s.io/v1")
    assert dict(item.metadata.labels) == {"a": "b"} and item.spec is None
    api.delete(name=name)


def test_server_side_apply_dry_run(dyn: DynamicClient) -> None:
    api = dyn.resources.get(api_version="v1", kind="Pod")
    name = short_name("pod")
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"name": name}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx",
                                         "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}}  # fmt: skip
    applied = api.server_side_apply(
        namespace=DEFAULT, body=manifest, field_manager="kubernetes-unittests", dry_run="All"
    )
    assert applied.metadata.managedFields[0].manager == "kubernetes-unittests"
    assert applied.metadata.managedFields[0].operation == "Apply"
    with pytest.raises(client.ApiException) as err:
        client.CoreV1Api(dyn.client).read_namespaced_pod(name, DEFAULT)
    assert err.value.status == 404  # dry run: nothing stored


def test_discovery_cache_file_is_reused(suite_api: client.ApiClient, tmp_path: Path) -> None:
    cache = str(tmp_path / "discovery.json")
    DynamicClient(suite_api, cache_file=cache).resources.get(api_version="v1", kind="Node")
    first = os.path.getmtime(cache)
    DynamicClient(suite_api, cache_file=cache).resources.get(api_version="v1", kind="Node")
    assert os.path.getmtime(cache) == first  # the second client found everything in the file


def test_discovery_cache_round_trip(suite_api: client.ApiClient, tmp_path: Path) -> None:
    """``kind`` alone is unique (no second Deployment anywhere), and a resource and its
    subresources decoded from the cache file equal the ones built from discovery."""
    cache = str(tmp_path / "discovery.json")
    DynamicClient(suite_api, cache_file=cache).resources.invalidate_cache()
    fresh = DynamicClient(suite_api, cache_file=cache).resources.get(kind="Deployment")
    cached = DynamicClient(suite_api, cache_file=cache).resources.get(kind="Deployment")
    # upstream's sync test compares the two with ``==``, which is identity for Resource (it fails on
    # any cluster); its asyncio twin compares to_dict(), as here
    assert fresh.to_dict() == cached.to_dict() and fresh.status.to_dict() == cached.status.to_dict()
    assert fresh.group_version == "apps/v1" and set(fresh.subresources) >= {"status", "scale"}


def test_metadata_only_get_list_and_watch(suite_api: client.ApiClient) -> None:
    """client-go's metadata client: protobuf first, then JSON, each ``as=PartialObjectMetadata[List]``;
    the sandbox answers the JSON form. The wrong one of the pair is 406, as upstream's transform."""
    core = client.CoreV1Api(suite_api)
    name = short_name("meta")
    core.create_namespaced_config_map(
        DEFAULT, {"metadata": {"name": name, "labels": {"m": "1"}}, "data": {"k": "v"}}
    )

    def accept(kind: str) -> dict[str, str]:
        wanted = f"as={kind};g=meta.k8s.io;v=v1"
        return {"Accept": f"application/vnd.kubernetes.protobuf;{wanted},application/json;{wanted},{JSON}"}

    path = f"/api/v1/namespaces/{DEFAULT}/configmaps"
    code, one = raw_request(suite_api, "GET", f"{path}/{name}", headers=accept("PartialObjectMetadata"))
    assert code == 200 and one["kind"] == "PartialObjectMetadata" and "data" not in one
    assert one["metadata"]["labels"] == {"m": "1"}
    code, listed = raw_request(
        suite_api, "GET", f"{path}?labelSelector=m%3D1", headers=accept("PartialObjectMetadataList")
    )
    assert code == 200 and listed["metadata"]["resourceVersion"]
    assert [(i["kind"], i["metadata"]["name"]) for i in listed["items"]] == [("PartialObjectMetadata", name)]
    code, refused = raw_request(suite_api, "GET", path, headers=accept("PartialObjectMetadata"))
    assert code == 406 and refused["reason"] == "NotAcceptable" and "is a list" in refused["message"]
    code, refused = raw_request(
        suite_api, "GET", f"{path}/{name}", headers=accept("PartialObjectMetadataList")
    )
    assert code == 406 and "is not a list" in refused["message"]
    code, refused = raw_request(
        suite_api, "GET", path, headers={"Accept": "application/json;as=Foo;g=meta.k8s.io;v=v1"}
    )
    assert code == 406
    beta_accept = {"Accept": f"{JSON};as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1"}
    code, beta = raw_request(suite_api, "GET", f"{path}/{name}", headers=beta_accept)
    assert code == 200 and beta["apiVersion"] == "meta.k8s.io/v1beta1"
    stream = "watch=true&timeoutSeconds=1&labelSelector=m%3D1&allowWatchBookmarks=true&sendInitialEvents=true"
    request = urllib.request.Request(
        f"{suite_api.configuration.host}{path}?{stream}&resourceVersionMatch=NotOlderThan",
        headers=accept("PartialObjectMetadata"),
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        events = [json.loads(line) for line in resp.read().splitlines() if line]
    assert [(e["type"], e["object"]["kind"]) for e in events][:2] == [
        ("ADDED", "PartialObjectMetadata"),
        ("BOOKMARK", "PartialObjectMetadata"),  # the initial-events-end bookmark is transformed too
    ]
    assert events[0]["object"]["metadata"]["name"] == name
    assert {e["object"]["kind"] for e in events} == {"PartialObjectMetadata"}  # later bookmarks too
    core.delete_namespaced_config_map(name, DEFAULT)
