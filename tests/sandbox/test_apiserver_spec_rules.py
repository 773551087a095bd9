"""Field rules of upstream's validation.go a client meets first (issue 15): port ranges, protocols,
container and port names, in pods, pod templates and Services; 422 with kube's causes, through
the official client and raw HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.sandbox.apiserver_support import (
    raw_request,
    unique,
)

pytestmark = pytest.mark.integration
RANGE = "must be between 1 and 65535, inclusive"


@pytest.fixture()
def ns(session_api: client.ApiClient) -> Iterator[str]:
    name = unique("rules")
    client.CoreV1Api(session_api).create_namespace({"metadata": {"name": name}})
    yield name
    client.CoreV1Api(session_api).delete_namespace(name)


def _causes(exc: client.ApiException) -> list[dict[str, Any]]:
    assert exc.status == 422, exc.body
    body = json.loads(exc.body)
    assert body["reason"] == "Invalid"
    causes: list[dict[str, Any]] = body["details"]["causes"]
    return causes


def _pod(container: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"image": "nginx", **container}]}}


def test_container_ports_and_names_through_the_typed_client(session_api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(session_api)
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod(ns, _pod({"name": "c", "ports": [{"containerPort": 70000}]}))
    assert _causes(info.value) == [
        {"reason": "FieldValueInvalid", "message": f"Invalid value: 70000: {RANGE}",
         "field": "spec.containers[0].ports[0].containerPort"}
    ]  # fmt: skip
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod(
            ns, _pod({"name": "Web_1", "ports": [{"containerPort": 80, "name": "http--alt"}]})
        )
    causes = _causes(info.value)
    assert [c["field"] for c in causes] == ["spec.containers[0].name", "spec.containers[0].ports[0].name"]
    assert causes[0]["message"].startswith('Invalid value: "Web_1": a lowercase RFC 1123 label must consist')
    assert causes[1]["message"] == 'Invalid value: "http--alt": must not contain consecutive hyphens'
    assert (
        'Pod "p" is invalid: spec.containers[0].name: Invalid value: "Web_1"'
        in json.loads(info.value.body)["message"]
    )
    good = core.create_namespaced_pod(
        ns, _pod({"name": "web", "ports": [{"containerPort": 80, "name": "http"}]})
    )
    assert good.spec.containers[0].ports[0].protocol == "TCP"


def test_pod_templates_are_checked_where_each_kind_keeps_them(session_api: client.ApiClient, ns: str) -> None:
    apps = client.AppsV1Api(session_api)
    containers = [{"name": "c", "image": "nginx"}, {"name": "c", "image": "x"}]
    template = {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": containers}}
    body = {
        "metadata": {"name": "w"},
        "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": template},
    }
    with pytest.raises(client.ApiException) as info:
        apps.create_namespaced_deployment(ns, body)
    assert _causes(info.value) == [
        {"reason": "FieldValueDuplicate", "message": 'Duplicate value: "c"',
         "field": "spec.template.spec.containers[1].name"}
    ]  # fmt: skip
    template["spec"]["containers"].pop()
    apps.create_namespaced_deployment(ns, body)
    with pytest.raises(client.ApiException) as info:  # an update is checked too
        apps.patch_namespaced_deployment(
            "w",
            ns,
            {
                "spec": {
                    "template": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 0}]}]}}
                }
            },
        )
    assert _causes(info.value)[0] == {
        "reason": "FieldValueRequired", "message": "Required value",
        "field": "spec.template.spec.containers[0].ports[0].containerPort",
    }  # fmt: skip


def test_service_ports_through_raw_http(session_api: client.ApiClient, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/services"
    ports = [{"port": 80}, {"port": 65536, "name": "b", "protocol": "HTTP"}]
    body: dict[str, Any] = {"metadata": {"name": "s"}, "spec": {"ports": ports}}
    code, status = raw_request(session_api, "POST", path, json.dumps(body).encode())
    assert code == 422 and status["reason"] == "Invalid"
    assert [(c["field"], c["reason"]) for c in status["details"]["causes"]] == [
        ("spec.ports[0].name", "FieldValueRequired"),
        ("spec.ports[1].port", "FieldValueInvalid"),
        ("spec.ports[1].protocol", "FieldValueNotSupported"),
        ("spec.ports[1].targetPort", "FieldValueInvalid"),  # defaulted from the port
    ]
    assert status["details"]["causes"][2]["message"] == (
        'Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"'
    )
    body["spec"]["ports"] = [{"port": 80, "name": "a"}, {"port": 81, "name": "a"}]
    code, status = raw_request(session_api, "POST", path, json.dumps(body).encode())
    assert code == 422 and status["details"]["causes"] == [
        {"reason": "FieldValueDuplicate", "message": 'Duplicate value: "a"', "field": "spec.ports[1].name"}
    ]
    body["spec"]["ports"] = [{"port": 80, "name": "a"}, {"port": 81, "name": "b", "targetPort": 8081}]
    code, created = raw_request(session_api, "POST", path, json.dumps(body).encode())
    assert code == 201, created
