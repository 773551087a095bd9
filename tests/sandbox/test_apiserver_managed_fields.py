"""managedFields from the first write, as kube-apiserver's field manager keeps them (issue 15).

Every create, update and patch records its manager (``?fieldManager=``, else the user agent's
first token), so a later server-side apply conflicts with an Update manager's fields, takes them
with ``force``, and kubectl migrates its own client-side applies without ``--force-conflicts``.
Through the official client (typed and dynamic), raw HTTP and kubectl.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from mcm_sandbox.procs import ApiServer
from tests.sandbox.apiserver_support import (
    GROUP,
    kubectl_runner,
    raw_request,
    unique,
    widget,
)

pytestmark = pytest.mark.integration
APPLY = "application/apply-patch+yaml"


@pytest.fixture()
def ns(session_api: client.ApiClient) -> Iterator[str]:
    name = unique("mf")
    client.CoreV1Api(session_api).create_namespace({"metadata": {"name": name}})
    yield name
    client.CoreV1Api(session_api).delete_namespace(name)


def _entries(obj: Any) -> dict[tuple[str, str, str], dict[str, Any]]:
    meta = obj["metadata"] if isinstance(obj, dict) else obj.to_dict()["metadata"]
    fields = meta.get("managedFields") or meta.get("managed_fields") or []
    return {
        (e["manager"], e["operation"], e.get("subresource") or ""): {
            **e,
            "fieldsV1": e.get("fieldsV1", e.get("fields_v1")),
        }
        for e in fields
    }


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }


def test_typed_client_writes_are_tracked_from_the_create(session_api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(session_api)
    created = core.create_namespaced_config_map(
        ns, {"metadata": {"name": "cm"}, "data": {"a": "1", "b": "2"}}
    )
    (entry,) = created.metadata.managed_fields
    assert entry.manager == "OpenAPI-Generator"  # the user agent's product, as upstream
    assert (entry.operation, entry.api_version, entry.fields_type) == ("Update", "v1", "FieldsV1")
    assert entry.time is not None and entry.subresource is None
    assert entry.fields_v1 == {"f:data": {".": {}, "f:a": {}, "f:b": {}}}
    patched = core.patch_namespaced_config_map("cm", ns, {"data": {"a": "9"}}, field_manager="ctl")
    owned = _entries(patched)
    assert owned[("ctl", "Update", "")]["fieldsV1"] == {"f:data": {"f:a": {}}}
    assert owned[("OpenAPI-Generator", "Update", "")]["fieldsV1"] == {"f:data": {".": {}, "f:b": {}}}


def test_status_writes_are_entries_of_the_status_subresource(session_api: client.ApiClient, ns: str) -> None:
    apps = client.AppsV1Api(session_api)
    apps.create_namespaced_deployment(ns, _deployment("web", 1), field_manager="creator")
    got = apps.patch_namespaced_deployment_status(
        "web", ns, {"status": {"observedGeneration": 1}}, field_manager="deployment-controller"
    )
    entry = _entries(got)[("deployment-controller", "Update", "status")]
    assert entry["fieldsV1"] == {"f:status": {"f:observedGeneration": {}}}
    assert "f:status" not in _entries(got)[("creator", "Update", "")]["fieldsV1"]


def test_apply_conflicts_with_an_update_manager_then_forces(session_api: client.ApiClient, ns: str) -> None:
    apps = client.AppsV1Api(session_api)
    apps.create_namespaced_deployment(ns, _deployment("web", 1), field_manager="helm")
    apps.patch_namespaced_deployment("web", ns, {"spec": {"replicas": 4}}, field_manager="autoscaler")
    dyn = DynamicClient(session_api).resources.get(api_version="apps/v1", kind="Deployment")
    with pytest.raises(client.ApiException) as info:
        dyn.server_side_apply(_deployment("web", 2), field_manager="gitops", namespace=ns)
    status = json.loads(info.value.body)
    assert info.value.status == 409
    assert status["message"] == (
        'Apply failed with 1 conflict: conflict with "autoscaler" using apps/v1: .spec.replicas'
    )
    assert status["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "autoscaler" using apps/v1',
         "field": ".spec.replicas"}
    ]  # fmt: skip
    # the image the creator set, applied with the same value: shared, not a conflict
    forced = dyn.server_side_apply(
        _deployment("web", 2), field_manager="gitops", namespace=ns, force_conflicts=True
    )
    owned = _entries(forced.to_dict())
    assert forced.spec.replicas == 2 and ("autoscaler", "Update", "") not in owned
    spec = owned[("helm", "Update", "")]["fieldsV1"]["f:spec"]
    assert "f:template" in spec and "f:replicas" not in spec


def test_raw_http_field_manager_and_clearing(session_api: client.ApiClient, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    body = json.dumps({"metadata": {"name": "raw"}, "data": {"k": "v"}}).encode()
    code, created = raw_request(session_api, "POST", path + "?fieldManager=raw-writer", body)
    assert code == 201 and [e["manager"] for e in created["metadata"]["managedFields"]] == ["raw-writer"]
    merge = "application/merge-patch+json"
    agent = {"User-Agent": "my-operator/v1.2 (linux)"}
    code, _ = raw_request(session_api, "PATCH", f"{path}/raw", b'{"data":{"k":"w"}}', merge, headers=agent)
    code, got = raw_request(session_api, "GET", f"{path}/raw")
    owned = {e["manager"]: e["fieldsV1"] for e in got["metadata"]["managedFields"]}
    assert owned == {"raw-writer": {"f:data": {}}, "my-operator": {"f:data": {"f:k": {}}}}  # the map stays
    long_agent = {"User-Agent": "x" * 200 + "/v1"}
    code, _ = raw_request(
        session_api, "PATCH", f"{path}/raw", b'{"data":{"k":"z"}}', merge, headers=long_agent
    )
    code, got = raw_request(session_api, "GET", f"{path}/raw")
    assert {e["manager"] for e in got["metadata"]["managedFields"]} >= {"x" * 128}  # prefixFromUserAgent
    clear = json.dumps({"metadata": {"managedFields": [{}]}}).encode()
    code, cleared = raw_request(session_api, "PATCH", f"{path}/raw", clear, merge)
    assert code == 200 and "managedFields" not in cleared["metadata"]


def test_custom_resources_use_object_meta_and_crd_key_defaults(
    session_api: client.ApiClient, ns: str
) -> None:
    ext = client.ApiextensionsV1Api(session_api)
    plural = unique("rules").replace("-", "")
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "rules": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name", "zone"],
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {
                                "name": {"type": "string"},
                                "zone": {"type": "string", "default": "a"},
                                "weight": {"type": "integer"},
                            },
                        },
                    }
                },
            }
        },
    }
    ext.create_custom_resource_definition(
        {
            "metadata": {"name": f"{plural}.{GROUP}"},
            "spec": {
                "group": GROUP,
                "scope": "Namespaced",
                "names": {"plural": plural, "singular": plural[:-1], "kind": "RuleSet"},
                "versions": [
                    {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
                ],
            },
        }
    )
    try:
        rules = DynamicClient(session_api).resources.get(api_version=f"{GROUP}/v1", kind="RuleSet")
        owner = client.CoreV1Api(session_api).create_namespaced_config_map(
            ns, {"metadata": {"name": "owner"}}
        )
        body = {"apiVersion": f"{GROUP}/v1", "kind": "RuleSet",
                "metadata": {"name": "r", "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}]},
                "spec": {"rules": [{"name": "x", "weight": 1}]}}  # fmt: skip
        created = rules.create(body=body, namespace=ns, field_manager="maker").to_dict()
        tree = _entries(created)[("maker", "Update", "")]["fieldsV1"]
        assert f'k:{{"uid":"{owner.metadata.uid}"}}' in tree["f:metadata"]["f:ownerReferences"]
        assert "." in tree["f:spec"]  # a custom resource starts empty: the creator owns spec itself
        assert 'k:{"name":"x","zone":"a"}' in tree["f:spec"]["f:rules"]
        # an applied item without its defaulted key is the stored item, not a second one
        applied = {"apiVersion": f"{GROUP}/v1", "kind": "RuleSet", "metadata": {"name": "r"},
                   "spec": {"rules": [{"name": "x", "weight": 2}]}}  # fmt: skip
        with pytest.raises(client.ApiException) as info:
            rules.server_side_apply(applied, field_manager="tuner", namespace=ns)
        assert '.spec.rules[name="x",zone="a"].weight' in json.loads(info.value.body)["message"]
        got = rules.server_side_apply(applied, field_manager="tuner", namespace=ns, force_conflicts=True)
        assert got.to_dict()["spec"]["rules"] == [{"name": "x", "zone": "a", "weight": 2}]
    finally:
        ext.delete_custom_resource_definition(f"{plural}.{GROUP}")


def test_widget_scale_and_status_writes_name_their_subresource(
    session_api: client.ApiClient, widgets: Any, ns: str
) -> None:
    widgets.create(body=widget("w", replicas=1), namespace=ns, field_manager="maker")
    custom = client.CustomObjectsApi(session_api)
    custom.patch_namespaced_custom_object_scale(GROUP, "v1", ns, "widgets", "w", {"spec": {"replicas": 3}},
                                                field_manager="hpa")  # fmt: skip
    got = custom.get_namespaced_custom_object(GROUP, "v1", ns, "widgets", "w")
    assert _entries(got)[("hpa", "Update", "scale")]["fieldsV1"] == {"f:spec": {"f:replicas": {}}}


# --- kubectl ----------------------------------------------------------------------------------


@pytest.fixture()
def kubectl(apiserver: ApiServer, tmp_path: Path) -> Any:
    return kubectl_runner(apiserver.kubeconfig, tmp_path / "cache")


def test_kubectl_migrates_client_side_apply_to_server_side(kubectl: Any, ns: str) -> None:
    assert "created" in kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(_deployment("web", 2)))
    got = json.loads(kubectl("get", "deployment", "web", "-n", ns, "-o", "json", "--show-managed-fields"))
    assert set(_entries(got)) == {("kubectl-client-side-apply", "Update", "")}
    out = kubectl("apply", "--server-side", "-n", ns, "-f", "-", stdin=yaml.safe_dump(_deployment("web", 3)))
    assert "serverside-applied" in out  # replicas: no conflict with its own client-side apply
    got = json.loads(kubectl("get", "deployment", "web", "-n", ns, "-o", "json", "--show-managed-fields"))
    assert got["spec"]["replicas"] == 3
    last = json.loads(got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last["spec"]["replicas"] == 3  # kept in step for a later client-side apply
    owned = _entries(got)
    # kubectl (1.26+) then folds its client-side entry into its Apply entry (csaupgrade) and keeps
    # the annotation as "kubectl-last-applied"
    assert ("kubectl-client-side-apply", "Update", "") not in owned
    assert "f:replicas" in owned[("kubectl", "Apply", "")]["fieldsV1"]["f:spec"]
    assert "f:annotations" in owned[("kubectl-last-applied", "Apply", "")]["fieldsV1"]["f:metadata"]
    assert got["spec"]["strategy"]["type"] == "RollingUpdate"  # pruned defaults come back


def test_kubectl_apply_conflicts_with_kubectl_scale_until_forced(kubectl: Any, ns: str) -> None:
    kubectl("create", "deployment", "web", "-n", ns, "--image=nginx", "--replicas=1")
    kubectl("scale", "deployment", "web", "-n", ns, "--replicas=5")
    got = json.loads(kubectl("get", "deployment", "web", "-n", ns, "-o", "json", "--show-managed-fields"))
    scalers = [k for k in _entries(got) if k[2] == "scale"]
    assert len(scalers) == 1
    manager = scalers[0][0]
    manifest = yaml.safe_dump(_deployment("web", 2) | {"spec": {**_deployment("web", 2)["spec"],
                              "selector": {"matchLabels": {"app": "web"}}}})  # fmt: skip
    out = kubectl(
        "apply", "--server-side", "--field-manager=ci", "-n", ns, "-f", "-", stdin=manifest, check=False
    )
    assert f'conflict with "{manager}" with subresource "scale" using apps/v1: .spec.replicas' in out
    kubectl(
        "apply",
        "--server-side",
        "--field-manager=ci",
        "--force-conflicts",
        "-n",
        ns,
        "-f",
        "-",
        stdin=manifest,
    )
    got = json.loads(kubectl("get", "deployment", "web", "-n", ns, "-o", "json", "--show-managed-fields"))
    assert got["spec"]["replicas"] == 2 and not [k for k in _entries(got) if k[2] == "scale"]


def test_what_the_server_makes_for_itself_is_kube_apiservers(session_api: client.ApiClient) -> None:
    core = client.CoreV1Api(session_api)
    for obj in (core.read_namespace("default"), core.read_namespaced_service("kubernetes", "default")):
        assert [e.manager for e in obj.metadata.managed_fields] == ["kube-apiserver"]
