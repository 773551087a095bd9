"""The kubectl battery (issue 15): the real kubectl, as a user runs it, against the sandbox.

Chunked lists of 1000+ objects in every output format, client-side apply and diff, the three
patch types, scale, cordon/drain with DaemonSet pods, explain (built-ins and a CRD), auth can-i and
create token against an RBAC-enforcing server, events, wait, and every typed ``kubectl create``
subcommand (protobuf bodies).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from mcm_sandbox.procs import ApiServer
from tests.sandbox.apiserver_support import (
    GROUP,
    kubectl_runner,
    unique,
)

pytestmark = pytest.mark.integration
Kubectl = Callable[..., str]


@pytest.fixture()
def kubectl(apiserver: ApiServer, tmp_path: Path) -> Kubectl:
    return kubectl_runner(apiserver.kubeconfig, tmp_path / "cache")


@pytest.fixture()
def ns(kubectl: Kubectl) -> Iterator[str]:
    name = unique("kb")
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


def _apply(kubectl: Kubectl, ns: str, docs: list[dict[str, Any]], *extra: str) -> str:
    return kubectl("apply", "-n", ns, *extra, "-f", "-", stdin=yaml.safe_dump_all(docs))


def test_get_chunks_more_than_a_thousand_objects(kubectl: Kubectl, session_api: Any, ns: str) -> None:
    core = client.CoreV1Api(session_api)
    for i in range(1050):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{i:04d}"}})
    names = kubectl("get", "configmaps", "-n", ns, "-o", "name").split()
    assert len(names) == 1050  # the default chunk size is 500
    table = kubectl("get", "configmaps", "-n", ns, "--chunk-size=7", "--no-headers").splitlines()
    assert len(table) == 1050 and table[-1].split()[0] == "cm-1049"
    as_json = json.loads(kubectl("get", "configmaps", "-n", ns, "--chunk-size=100", "-o", "json"))
    assert len(as_json["items"]) == 1050


SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "two"},
    "spec": {"selector": {"app": "web"}, "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]},
}


def test_client_side_apply_and_diff_keep_both_ports(kubectl: Kubectl, ns: str) -> None:
    assert "created" in _apply(kubectl, ns, [SERVICE])
    edited = json.loads(json.dumps(SERVICE))
    edited["spec"]["ports"][1]["targetPort"] = 9090
    diff = kubectl("diff", "-n", ns, "-f", "-", stdin=yaml.safe_dump(edited), check=False)
    assert "+    targetPort: 9090" in diff and "-    targetPort: 81" in diff
    assert "configured" in _apply(kubectl, ns, [edited])
    ports = json.loads(kubectl("get", "service", "two", "-n", ns, "-o", "json"))["spec"]["ports"]
    assert [(p["port"], p["targetPort"]) for p in ports] == [(80, 80), (81, 9090)]
    assert kubectl("diff", "-n", ns, "-f", "-", stdin=yaml.safe_dump(edited)) == ""


DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web"},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        },
    },
}


def test_patch_in_three_types_scale_and_wait(kubectl: Kubectl, ns: str) -> None:
    _apply(kubectl, ns, [DEPLOYMENT])
    kubectl("patch", "deployment", "web", "-n", ns, "--type=json", "-p",
            '[{"op":"replace","path":"/spec/replicas","value":1}]')  # fmt: skip
    kubectl(
        "patch", "deployment", "web", "-n", ns, "--type=merge", "-p", '{"metadata":{"labels":{"tier":"x"}}}'
    )
    kubectl("patch", "deployment", "web", "-n", ns, "-p",
            '{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"nginx:2"}]}}}}')  # fmt: skip
    got = json.loads(kubectl("get", "deployment", "web", "-n", ns, "-o", "json"))
    assert got["spec"]["replicas"] == 1 and got["metadata"]["labels"] == {"tier": "x"}
    assert got["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:2"
    assert got["metadata"]["generation"] == 3
    assert "scaled" in kubectl("scale", "deployment", "web", "-n", ns, "--replicas=4")
    kubectl("patch", "deployment", "web", "-n", ns, "--subresource=status", "--type=merge", "-p",
            '{"status":{"conditions":[{"type":"Available","status":"True","reason":"R"}]}}')  # fmt: skip
    kubectl("wait", "-n", ns, "--for=condition=Available", "deployment/web", "--timeout=20s")
    kubectl("wait", "-n", ns, "--for=jsonpath={.spec.replicas}=4", "deployment/web", "--timeout=20s")
    table = kubectl("get", "deployment", "web", "-n", ns).splitlines()
    assert table[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    kubectl("delete", "deployment", "web", "-n", ns, "--wait=false")
    kubectl("wait", "-n", ns, "--for=delete", "deployment/web", "--timeout=20s")


def test_cordon_and_drain_leave_daemonset_pods(kubectl: Kubectl, ns: str) -> None:
    node = unique("node")
    kubectl(
        "create",
        "-f",
        "-",
        stdin=yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
    )
    owners = {}
    for kind, name in (("DaemonSet", "ds"), ("ReplicaSet", "rs")):
        body = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name},
                "spec": {"selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}},
                                      "spec": {"containers": [{"name": "c", "image": "i"}]}}}}  # fmt: skip
        _apply(kubectl, ns, [body])
        owners[name] = json.loads(kubectl("get", kind.lower(), name, "-n", ns, "-o", "json"))["metadata"][
            "uid"
        ]
    for name, kind in (("ds", "DaemonSet"), ("rs", "ReplicaSet")):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{name}-pod", "labels": {"app": name},
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": name,
                                                 "uid": owners[name], "controller": True}]},
               "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}}  # fmt: skip
        kubectl("create", "-n", ns, "-f", "-", stdin=yaml.safe_dump(pod))
    assert "cordoned" in kubectl("cordon", node)
    refused = kubectl("drain", node, "--timeout=10s", check=False)
    assert "cannot delete DaemonSet-managed Pods" in refused
    out = kubectl("drain", node, "--ignore-daemonsets", "--grace-period=1", "--timeout=60s", with_stderr=True)
    assert f"evicting pod {ns}/rs-pod" in out and f"node/{node} drained" in out
    assert kubectl("get", "pods", "-n", ns, "-o", "name").split() == ["pod/ds-pod"]
    assert json.loads(kubectl("get", "node", node, "-o", "json"))["spec"]["unschedulable"] is True
    assert "uncordoned" in kubectl("uncordon", node)
    kubectl("delete", "node", node)


def test_explain_built_ins_and_a_crd(kubectl: Kubectl, widgets: Any) -> None:
    out = kubectl("explain", "deployment.spec.replicas")
    assert "FIELD: replicas <integer>" in out and "Number of desired pods" in out
    out = kubectl("explain", "pods.spec.containers.ports")
    assert "<[]ContainerPort>" in out
    assert "selector" in kubectl("explain", "services.spec", "--recursive")
    out = kubectl("explain", f"widgets.{GROUP}.spec")
    assert "replicas" in out and "size" in out


def test_typed_create_commands_send_protobuf(kubectl: Kubectl, ns: str) -> None:
    commands = [
        ["create", "serviceaccount", "robot"],
        ["create", "service", "nodeport", "np", "--tcp=80:8080"],
        ["create", "service", "externalname", "en", "--external-name=example.com"],
        ["create", "pdb", "pdb", "--selector=app=web", "--max-unavailable=50%"],
        ["create", "deployment", "d", "--image=nginx:1", "--port=80", "--replicas=2"],
        ["create", "role", "r", "--verb=get,list", "--resource=pods,deployments.apps"],
        ["create", "rolebinding", "rb", "--role=r", f"--serviceaccount={ns}:robot"],
        ["create", "job", "j", "--image=busybox"],
        ["create", "cronjob", "cj", "--image=busybox", "--schedule=*/5 * * * *"],
        ["create", "quota", "q", "--hard=pods=3"],
        ["create", "ingress", "ing", "--rule=foo.com/bar=svc1:8080"],
    ]
    for args in commands:
        assert "created" in kubectl(*args, "-n", ns)
    svc = json.loads(kubectl("get", "service", "np", "-n", ns, "-o", "json"))
    assert svc["spec"]["ports"][0]["targetPort"] == 8080 and svc["spec"]["type"] == "NodePort"
    pdb = json.loads(kubectl("get", "pdb", "pdb", "-n", ns, "-o", "json"))
    assert pdb["spec"]["maxUnavailable"] == "50%" and pdb["spec"]["selector"] == {
        "matchLabels": {"app": "web"}
    }
    dep = json.loads(kubectl("get", "deployment", "d", "-n", ns, "-o", "json"))
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["template"]["spec"]["containers"][0]["ports"] == [
        {"containerPort": 80, "protocol": "TCP"}
    ]
    rb = json.loads(kubectl("get", "rolebinding", "rb", "-n", ns, "-o", "json"))
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "robot", "namespace": ns}]
    assert kubectl("create", "token", "robot", "-n", ns, "--duration=15m").startswith("ey")


def test_events_from_both_apis(kubectl: Kubectl, session_api: Any, ns: str) -> None:
    core = client.CoreV1Api(session_api)
    core.create_namespaced_event(
        ns,
        {"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
         "reason": "Pulled", "message": "image pulled", "type": "Normal", "count": 1,
         "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"},
    )  # fmt: skip
    out = kubectl("events", "-n", ns)
    assert "Pulled" in out and "image pulled" in out
    out = kubectl("get", "events", "-n", ns)
    assert "Pulled" in out


def test_server_side_apply_owns_fields_and_reports_conflicts(kubectl: Kubectl, ns: str) -> None:
    assert "serverside-applied" in _apply(kubectl, ns, [DEPLOYMENT, SERVICE], "--server-side")
    got = json.loads(kubectl("get", "deployment", "web", "-n", ns, "-o", "json", "--show-managed-fields"))
    (entry,) = got["metadata"]["managedFields"]
    assert entry["manager"] == "kubectl" and entry["operation"] == "Apply"
    assert 'k:{"name":"c"}' in entry["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    kubectl("scale", "deployment", "web", "-n", ns, "--replicas=5")
    conflict = kubectl("apply", "--server-side", "--field-manager=ci", "-n", ns, "-f", "-",
                       stdin=yaml.safe_dump(DEPLOYMENT), check=False)  # fmt: skip
    scaler = '"kubectl" with subresource "scale" using apps/v1'  # kubectl scale's manager
    assert f"Apply failed with 1 conflict: conflict with {scaler}: .spec.replicas" in conflict
    _apply(kubectl, ns, [DEPLOYMENT], "--server-side", "--field-manager=ci", "--force-conflicts")
    got = json.loads(kubectl("get", "deployment", "web", "-n", ns, "-o", "json", "--show-managed-fields"))
    assert got["spec"]["replicas"] == 2
    assert {e["manager"] for e in got["metadata"]["managedFields"]} == {"kubectl", "ci"}
    smaller = json.loads(json.dumps(SERVICE))
    smaller["spec"]["ports"] = smaller["spec"]["ports"][:1]
    _apply(kubectl, ns, [smaller], "--server-side")  # a field the manager stops applying goes
    ports = json.loads(kubectl("get", "service", "two", "-n", ns, "-o", "json"))["spec"]["ports"]
    assert [p.get("port") for p in ports] == [80], ports
