"""kubectl against the sandbox, unchanged: get with printer columns, create, label, scale, delete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcm_sandbox.procs import ApiServer
from tests.sandbox.apiserver_support import (
    GROUP,
    kubectl_runner,
    unique,
    widget,
)

pytestmark = pytest.mark.integration


@pytest.fixture()
def kubectl(apiserver: ApiServer, tmp_path: Path) -> Any:
    return kubectl_runner(apiserver.kubeconfig, tmp_path / "cache")


def test_kubectl_smoke(kubectl: Any, widgets: Any, tmp_path: Path) -> None:
    ns = unique("kubectl")
    kubectl("create", "namespace", ns)
    manifest = tmp_path / "w.yaml"
    manifest.write_text(yaml.safe_dump(widget("smoke", 2)))
    assert "created" in kubectl("create", "-n", ns, "-f", str(manifest))
    widgets.status.patch(
        name="smoke",
        namespace=ns,
        body={"status": {"phase": "Ready"}},
        content_type="application/merge-patch+json",
    )
    table = kubectl("get", "wid", "-n", ns).splitlines()  # short name, printer columns
    assert table[0].split() == ["NAME", "REPLICAS", "PHASE", "AGE"]
    assert table[1].split()[:3] == ["smoke", "2", "Ready"]
    kubectl("label", "widgets", "smoke", "-n", ns, "team=blue")
    assert "smoke" in kubectl("get", "widgets", "-n", ns, "-l", "team=blue", "-o", "name")
    assert "scaled" in kubectl("scale", f"widgets.{GROUP}/smoke", "-n", ns, "--replicas=5")
    got = json.loads(kubectl("get", "widget", "smoke", "-n", ns, "-o", "json"))
    assert got["spec"]["replicas"] == 5 and got["metadata"]["labels"] == {"team": "blue"}
    kubectl("create", "configmap", "cm", "-n", ns, "--from-literal=a=b")
    pods = kubectl("get", "configmaps", "-n", ns).splitlines()
    assert pods[0].split() == ["NAME", "DATA", "AGE"] and pods[1].split()[:2] == ["cm", "1"]
    assert "deleted" in kubectl("delete", "widget", "smoke", "-n", ns)
    assert "No resources found" in kubectl("get", "widgets", "-n", ns, with_stderr=True)
    kubectl("create", "secret", "generic", "s", "-n", ns, "--from-literal=k=v")  # protobuf bodies
    assert json.loads(kubectl("get", "secret", "s", "-n", ns, "-o", "json"))["data"] == {"k": "dg=="}
    kubectl("delete", "namespace", ns)


def test_kubectl_drain_evicts_through_protobuf_bodies(kubectl: Any, tmp_path: Path) -> None:
    node, ns = unique("node"), unique("drain")
    kubectl("create", "namespace", ns)
    manifest = tmp_path / "objs.yaml"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "x"}],
        },
    }
    manifest.write_text(
        yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}, pod])
    )
    kubectl("create", "-f", str(manifest))
    out = kubectl("drain", node, "--force", "--ignore-daemonsets", "--timeout=30s", with_stderr=True)
    assert "evicting pod" in out and "drained" in out
    assert json.loads(kubectl("get", "node", node, "-o", "json"))["spec"]["unschedulable"] is True
    assert "No resources found" in kubectl("get", "pods", "-n", ns, with_stderr=True)
