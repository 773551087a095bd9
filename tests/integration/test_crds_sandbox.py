"""The generated CRDs, registered in the sandbox API server, accept the upstream-format manifests, give
them back unchanged (providerSpec's unknown fields included), and refuse wrong types with 422."""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcm_sandbox.crds import install_crds
from mcm_tasks.api import GROUP, VERSION, dump, parse

pytestmark = pytest.mark.integration

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
ALL_MANIFESTS = sorted(MANIFESTS.glob("*.yaml"))
#: metadata the server fills in on create; everything else must come back as sent
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink")


@pytest.fixture()
def dynamic(kube_api: Any, tmp_path: Path) -> Any:
    """A dynamic client whose discovery starts after the CRDs are served (and caches in tmp_path)."""
    from kubernetes.dynamic import DynamicClient

    install_crds(kube_api)
    return DynamicClient(kube_api, cache_file=str(tmp_path / "discovery.json"))


@pytest.fixture()
def namespace(kube_api: Any, dynamic: Any) -> str:
    """A namespace of the test's own, so no controller or other test meets these objects."""
    from kubernetes import client

    name = f"crds-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(kube_api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def resource(dynamic: Any, kind: str) -> Any:
    return dynamic.resources.get(api_version=f"{GROUP}/{VERSION}", kind=kind)


def for_create(manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The manifest as a user would create it: no status (a subresource), no owner references (their
    owners do not exist here, and the garbage collector would rightly remove such orphans)."""
    body = copy.deepcopy(manifest)
    body.pop("status", None)
    body["metadata"].pop("ownerReferences", None)
    body["metadata"]["namespace"] = namespace
    return body


def without_server_fields(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for key in SERVER_SET:
        out["metadata"].pop(key, None)
    return out


@pytest.mark.parametrize("path", ALL_MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_stored_and_read_back_unchanged(dynamic: Any, namespace: str, path: Path) -> None:
    manifest = yaml.safe_load(path.read_text())
    api = resource(dynamic, manifest["kind"])
    body = for_create(manifest, namespace)
    name = body["metadata"]["name"]

    created = api.create(body=body, namespace=namespace).to_dict()
    assert without_server_fields(created) == body
    got = api.get(name=name, namespace=namespace).to_dict()
    assert without_server_fields(got) == body
    assert got["metadata"]["uid"] and got["metadata"]["resourceVersion"]
    # what the server returns is itself read and written losslessly by the models
    assert dump(parse(got)) == got

    if "status" in manifest:
        updated = api.status.replace(
            body={**got, "status": manifest["status"]}, namespace=namespace
        ).to_dict()
        assert updated["status"] == manifest["status"]
        again = api.get(name=name, namespace=namespace).to_dict()
        assert again["status"] == manifest["status"]
        assert without_server_fields(again) == {**body, "status": manifest["status"]}
        assert dump(parse(again)) == again


def test_provider_spec_unknown_fields_survive_the_server(dynamic: Any, namespace: str) -> None:
    api = resource(dynamic, "MachineClass")
    body = for_create(yaml.safe_load((MANIFESTS / "machineclass-aws.yaml").read_text()), namespace)
    body["providerSpec"]["brandNew"] = {"deeply": {"nested": [1, {"x": "y"}]}}
    api.create(body=body, namespace=namespace)
    got = api.get(name=body["metadata"]["name"], namespace=namespace).to_dict()
    assert got["providerSpec"] == body["providerSpec"]


@pytest.mark.parametrize("kind", ["MachineSet", "MachineDeployment"])
def test_scale_subresource_reads_replicas(dynamic: Any, namespace: str, kind: str) -> None:
    name = {"MachineSet": "machineset.yaml", "MachineDeployment": "machinedeployment-rolling.yaml"}[kind]
    api = resource(dynamic, kind)
    body = for_create(yaml.safe_load((MANIFESTS / name).read_text()), namespace)
    api.create(body=body, namespace=namespace)
    scale = api.scale.get(name=body["metadata"]["name"], namespace=namespace).to_dict()
    assert scale["spec"]["replicas"] == 3


@pytest.mark.parametrize(
    ("name", "path", "value"),
    [
        ("machine.yaml", ["spec", "maxEvictRetries"], "many"),
        ("machineset.yaml", ["spec", "replicas"], "three"),
        ("machinedeployment-rolling.yaml", ["spec", "strategy", "rollingUpdate", "maxSurge"], [1]),
        ("machineclass-aws.yaml", ["providerSpec"], "ami-123"),
    ],
    ids=["machine", "machineset", "machinedeployment", "machineclass"],
)
def test_wrong_type_is_refused_with_422(
    dynamic: Any, namespace: str, name: str, path: list[str], value: Any
) -> None:
    from kubernetes.dynamic.exceptions import DynamicApiError

    body = for_create(yaml.safe_load((MANIFESTS / name).read_text()), namespace)
    node = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(DynamicApiError) as refused:
        resource(dynamic, body["kind"]).create(body=body, namespace=namespace)
    assert refused.value.status == 422
    detail = refused.value.body
    assert ".".join(path) in (detail.decode() if isinstance(detail, bytes) else str(detail))
