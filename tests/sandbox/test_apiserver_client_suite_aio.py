"""The official client's asyncio half (``kubernetes.aio``): its e2e suite (``kubernetes/aio/e2e_test``)
and its dynamic client's e2e tests (``kubernetes/aio/dynamic/client_test.py``), ported against the
sandbox. Each test drives the client with ``asyncio.run``.

Each upstream test -> ours:

    aio/e2e_test/test_api.py
      test_create_deployment, test_create_deployment_from_yaml_file, test_create_daemonset
                                              -> test_apps_typed_and_from_yaml
    aio/e2e_test/test_apply_patch.py
      test_apply_patch                        -> test_apply_then_strategic_patch_with_a_model
    aio/e2e_test/test_batch.py
      test_job_apis                           -> test_job_background_then_foreground_delete
    aio/e2e_test/test_dynamic_client.py
      test_pod_apis                           -> test_dynamic_pod_without_a_kubelet (the half that
                                                 needs no running container)
    aio/e2e_test/test_issue_2387_proxy_ssl_context.py -> not ported: its own mock server, no cluster
    aio/dynamic/client_test.py
      test_cluster_custom_resources           -> test_dynamic_custom_resources_and_watch[Cluster]
      test_namespaced_custom_resources        -> test_dynamic_custom_resources_and_watch[Namespaced]
      test_service_apis, test_replication_controller_apis, test_configmap_apis, test_node_apis
                                              -> test_dynamic_core_kinds
      test_node_apis_partial_object_metadata  -> test_dynamic_partial_object_metadata
      test_server_side_apply_api              -> test_dynamic_server_side_apply (upstream applies a
          Deployment body at a pods path, which kube-apiserver refuses with 400 "Incorrect version
          specified in apply patch"; ours checks that answer, and a Pod body's managedFields)
      TestDynamicClientSerialization (3)      -> not ported: client-side serialization, no request
    aio/dynamic/discovery_test.py
      test_init_cache_from_file, test_cache_decoder_resource_and_subresource
                                              -> test_dynamic_discovery_cache
      test_get_resources_for_api_version      -> not ported: a mocked discoverer, no request
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as sync_client
from kubernetes.aio import client, utils
from kubernetes.aio.dynamic import DynamicClient
from kubernetes.aio.dynamic.exceptions import ResourceNotFoundError

pytestmark = pytest.mark.integration

DEFAULT = "default"
GROUP = "apps.example.com"
Body = dict[str, Any]


def short_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(name="run")
def run_fixture(
    suite_api: sync_client.ApiClient,
) -> Callable[[Callable[[client.ApiClient], Awaitable[Any]]], Any]:
    """Run one coroutine against the module's sandbox with an asyncio ApiClient of its own."""
    host = suite_api.configuration.host

    def run(scenario: Callable[[client.ApiClient], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            async with client.ApiClient(configuration=client.Configuration(host=host)) as api:
                return await scenario(api)

        return asyncio.run(main())

    return run


def deployment(name: str) -> Body:
    return yaml.safe_load(f"""
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: 3
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
        - name: nginx
          image: nginx:1.7.9
          ports:
            - containerPort: 80
""")


def test_apps_typed_and_from_yaml(run: Any, tmp_path: Path) -> None:
    async def scenario(api: client.ApiClient) -> None:
        apps = client.AppsV1Api(api)
        typed = short_name("nginx-deployment")
        await apps.create_namespaced_deployment(DEFAULT, deployment(typed))
        assert (await apps.read_namespaced_deployment(typed, DEFAULT)).spec.replicas == 3
        await apps.delete_namespaced_deployment(typed, DEFAULT, body=client.V1DeleteOptions())
        from_file = short_name("nginx-deployment")
        path = tmp_path / "deployment.yaml"
        path.write_text(yaml.safe_dump(deployment(from_file)))
        await utils.create_from_yaml(api, str(path))
        assert (await apps.read_namespaced_deployment(from_file, DEFAULT)).metadata.name == from_file
        await apps.delete_namespaced_deployment(from_file, DEFAULT, body=client.V1DeleteOptions())
        ds_name = short_name("nginx-app")
        template = {
            "metadata": {"labels": {"app": "nginx"}, "name": ds_name},
            "spec": {"containers": [{"name": "nginx-app", "image": "nginx:1.10"}]},
        }
        ds = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": ds_name, "labels": {"app": "nginx"}},
            "spec": {
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": template,
                "updateStrategy": {"type": "RollingUpdate"},
            },
        }
        await apps.create_namespaced_daemon_set(DEFAULT, ds)
        read = await apps.read_namespaced_daemon_set(ds_name, DEFAULT)
        assert read.spec.update_strategy.rolling_update.max_unavailable == 1
        await apps.delete_namespaced_daemon_set(ds_name, DEFAULT, body=client.V1DeleteOptions())

    run(scenario)


def test_apply_then_strategic_patch_with_a_model(run: Any) -> None:
    async def scenario(api: client.ApiClient) -> None:
        core = client.CoreV1Api(api)
        name = short_name("cm-test")
        manifest = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"namespace": DEFAULT, "name": name},
            "data": {"hello": "world!"},
        }
        applied = await core.patch_namespaced_config_map(
            name, DEFAULT, manifest, field_manager="test", _content_type="application/apply-patch+yaml"
        )
        assert applied.metadata.name == name and applied.metadata.managed_fields[0].manager == "test"
        cm = await core.read_namespaced_config_map(name, DEFAULT)
        cm.data["new"] = "value"
        patched = await core.patch_namespaced_config_map(name, DEFAULT, cm, field_manager="test")
        assert patched.data == {"hello": "world!", "new": "value"}
        await core.delete_namespaced_config_map(name, DEFAULT, body={})

    run(scenario)


def test_job_background_then_foreground_delete(run: Any) -> None:
    """Background: the Job is gone at once (a Status), so the same name can be made again;
    Foreground: it stays, with the foregroundDeletion finalizer, until its dependents are gone."""

    async def scenario(api: client.ApiClient) -> None:
        batch = client.BatchV1Api(api)
        name = short_name("test-job")
        container = {"image": "busybox", "name": name, "command": ["sh", "-c", "sleep 5"]}
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "template": {
                    "metadata": {"name": name},
                    "spec": {"containers": [container], "restartPolicy": "Never"},
                }
            },
        }
        assert (await batch.create_namespaced_job(DEFAULT, job)).metadata.name == name
        assert (await batch.read_namespaced_job(name, DEFAULT)).metadata.name == name
        gone = await batch.delete_namespaced_job(name, DEFAULT, body={"propagationPolicy": "Background"})
        assert (gone["kind"], gone["status"], gone["details"]["name"]) == ("Status", "Success", name)
        assert (await batch.create_namespaced_job(DEFAULT, job)).metadata.name == name
        going = await batch.delete_namespaced_job(name, DEFAULT, body={"propagationPolicy": "Foreground"})
        assert going["kind"] == "Job" and going["metadata"]["name"] == name
        assert "foregroundDeletion" in going["metadata"]["finalizers"]

    run(scenario)


def test_dynamic_pod_without_a_kubelet(run: Any) -> None:
    async def scenario(api: client.ApiClient) -> None:
        dyn = await DynamicClient(api)
        pods = await dyn.resources.get(kind="Pod", api_version="v1")
        name = short_name("busybox-test")
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "containers": [
                    {
                        "image": "busybox",
                        "name": "sleep",
                        "args": ["/bin/sh", "-c", "while true; do date; sleep 5; done"],
                    }
                ]
            },
        }
        made = await dyn.create(pods, body=body, namespace=DEFAULT)
        assert made.metadata.name == name and made.status.phase == "Pending"
        assert (await dyn.get(pods, name=name, namespace=DEFAULT)).status.phase == "Pending"
        assert name in {p.metadata.name for p in (await dyn.get(pods)).items}
        await dyn.delete(pods, name=name, body={}, namespace=DEFAULT)

    run(scenario)


def changeme_crd(kind: str, plural: str, scope: str) -> Body:
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "versions": [
                {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
            ],
        },
    }


async def discovered(dyn: DynamicClient, kind: str) -> Any:
    for _ in range(150):
        try:
            return await dyn.resources.get(api_version=f"{GROUP}/v1", kind=kind)
        except ResourceNotFoundError:
            await dyn.resources.invalidate_cache()
            await asyncio.sleep(0.1)
    raise AssertionError(f"{kind} never discovered")


@pytest.mark.parametrize("scope", ["Cluster", "Namespaced"])
def test_dynamic_custom_resources_and_watch(run: Any, scope: str, tmp_path: Path) -> None:
    kind = f"Aio{scope}ChangeMe"
    plural = kind.lower() + "s"
    ns = {"namespace": DEFAULT} if scope == "Namespaced" else {}

    async def scenario(api: client.ApiClient) -> None:
        dyn = await DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))
        with pytest.raises(ResourceNotFoundError):
            await dyn.resources.get(api_version=f"{GROUP}/v1", kind=kind)
        crds = await dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
        made = await crds.create(changeme_crd(kind, plural, scope))
        assert made.metadata.name == f"{plural}.{GROUP}" and made.status
        changemes = await discovered(dyn, kind)
        assert (await changemes.get()).items == []
        name = short_name("custom-resource")
        body: Body = {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": name}, "spec": {}}
        assert (await changemes.create(body=body, **ns)).metadata.name == name
        seen = [e async for e in dyn.watch(changemes, timeout=1, namespace=DEFAULT, name=name)]
        assert [(e["type"], e["object"].metadata.name) for e in seen] == [("ADDED", name)]

        async def forever() -> None:
            async for _ in dyn.watch(changemes, namespace=DEFAULT, name=name):
                pass

        with pytest.raises(asyncio.TimeoutError):  # no timeout asked: the server keeps the watch open
            await asyncio.wait_for(forever(), timeout=1)
        body["spec"]["size"] = 3
        patched = await changemes.patch(body=body, content_type="application/merge-patch+json", **ns)
        assert patched.spec.size == 3 and (await changemes.get(name=name, **ns)).spec.size == 3
        assert len((await changemes.get()).items) == 1
        await changemes.delete(name=name, **ns)
        assert (await changemes.get()).items == []
        await crds.delete(name=f"{plural}.{GROUP}")
        for _ in range(150):
            await dyn.resources.invalidate_cache()
            try:
                await dyn.resources.get(api_version=f"{GROUP}/v1", kind=kind)
            except ResourceNotFoundError:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"{kind} still discovered after its CRD was deleted")

    run(scenario)


def test_dynamic_core_kinds(run: Any) -> None:
    async def scenario(api: client.ApiClient) -> None:
        dyn = await DynamicClient(api)
        services = await dyn.resources.get(api_version="v1", kind="Service")
        name = short_name("frontend")
        svc: Body = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "labels": {"name": name}, "resourceversion": "v1"},
            "spec": {
                "selector": {"name": name},
                "ports": [{"name": "port", "port": 80, "protocol": "TCP", "targetPort": 80}],
            },
        }
        assert (await services.create(body=svc, namespace=DEFAULT)).status
        svc["spec"]["ports"] = [{"name": "new", "port": 8080, "protocol": "TCP", "targetPort": 8080}]
        assert len((await services.patch(body=svc, name=name, namespace=DEFAULT)).spec.ports) == 2
        await services.delete(name=name, body={}, namespace=DEFAULT)

        rcs = await dyn.resources.get(api_version="v1", kind="ReplicationController")
        template = {
            "metadata": {"labels": {"name": name}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx"}]},
        }
        rc = {
            "apiVersion": "v1",
            "kind": "ReplicationController",
            "metadata": {"name": name},
            "spec": {"replicas": 2, "selector": {"name": name}, "template": template},
        }
        assert (await rcs.create(body=rc, namespace=DEFAULT)).spec.replicas == 2
        assert (await rcs.get(name=name, namespace=DEFAULT)).spec.replicas == 2
        await rcs.delete(name=name, namespace=DEFAULT, propagation_policy="Background")

        cms = await dyn.resources.get(api_version="v1", kind="ConfigMap")
        cm: Body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"e2e-test": "true"}},
            "data": {"config.json": '{"command":"/usr/bin/mysqld_safe"}'},
        }
        await cms.create(body=cm, namespace=DEFAULT)
        assert (
            await cms.get(name=name, namespace=DEFAULT, label_selector="e2e-test=true")
        ).metadata.name == name
        cm["data"]["config.json"] = "{}"
        assert (await cms.patch(name=name, namespace=DEFAULT, body=cm)).data["config.json"] == "{}"
        await cms.delete(name=name, body={}, namespace=DEFAULT)
        assert (await cms.get(namespace=DEFAULT, pretty=True, label_selector="e2e-test=true")).items == []

        nodes = await dyn.resources.get(api_version="v1", kind="Node")
        await nodes.create(
            body={
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            }
        )
        for item in (await nodes.get()).items:
            assert len(dict((await nodes.get(name=item.metadata.name)).metadata.labels)) > 0
        await nodes.delete(name=name)

    run(scenario)


def test_dynamic_partial_object_metadata(run: Any) -> None:
    async def scenario(api: client.ApiClient) -> None:
        dyn = await DynamicClient(api)
        nodes = await dyn.resources.get(api_version="v1", kind="Node")
        accept = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
        for header in ("Accept", "aCcePt"):
            listed = await nodes.get(header_params={header: accept})
            assert (listed.kind, listed.apiVersion) == ("PartialObjectMetadataList", "meta.k8s.io/v1")

    run(scenario)


def test_dynamic_server_side_apply(run: Any) -> None:
    async def scenario(api: client.ApiClient) -> None:
        dyn = await DynamicClient(api)
        pods = await dyn.resources.get(api_version="v1", kind="Pod")
        name = short_name("pod")
        spec = {
            "containers": [
                {"image": "nginx", "name": "nginx", "ports": [{"containerPort": 80, "protocol": "TCP"}]}
            ]
        }
        wrong = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {"template": {"spec": spec}},
        }
        with pytest.raises(client.ApiException) as err:
            await pods.server_side_apply(
                namespace=DEFAULT, body=wrong, field_manager="kubernetes-unittests", dry_run="All"
            )
        status = json.loads(err.value.body)
        assert err.value.status == 400 and status["reason"] == "BadRequest"
        assert status["message"] == (
            "Incorrect version specified in apply patch. Specified patch version: apps/v1, expected: v1"
        )
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
        applied = await pods.server_side_apply(
            namespace=DEFAULT, body=pod, field_manager="kubernetes-unittests", dry_run="All"
        )
        assert applied.metadata.managedFields[0].manager == "kubernetes-unittests"

    run(scenario)


def test_dynamic_discovery_cache(run: Any, tmp_path: Path) -> None:
    cache = str(tmp_path / "discovery.json")

    async def first(api: client.ApiClient) -> Any:
        dyn = await DynamicClient(api, cache_file=cache)
        await dyn.resources.invalidate_cache()
        await dyn.resources.get(api_version="v1", kind="Node")
        return (await dyn.resources.get(kind="Deployment", api_version="apps/v1")).to_dict()

    async def again(api: client.ApiClient) -> Any:
        dyn = await DynamicClient(api, cache_file=cache)
        await dyn.resources.get(api_version="v1", kind="Node")
        return (await dyn.resources.get(kind="Deployment", api_version="apps/v1")).to_dict()

    fresh = run(first)
    written = os.path.getmtime(cache)
    assert run(again) == fresh and os.path.getmtime(cache) == written  # all from the file
