"""Built-in API groups the sandbox serves as storage: apps/v1, batch/v1, core RCs and
ServiceAccounts, RBAC, apiregistration, policy, autoscaling/v2, networking, coordination.

Pinned through the typed client, the dynamic client and ``kubernetes.utils.create_from_yaml`` with
a multi-document file, as a Helm chart or a user's manifests would arrive.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.dynamic import DynamicClient

from mcm_sandbox.procs import wait_until
from tests.sandbox.apiserver_support import (
    raw_request,
    unique,
)

pytestmark = pytest.mark.integration

POD_TEMPLATE = {
    "metadata": {"labels": {"app": "web"}},
    "spec": {"containers": [{"name": "c", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]},
}


JOB_POD = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}


@pytest.fixture()
def ns(session_api: client.ApiClient) -> Any:
    name = unique("wl")
    core = client.CoreV1Api(session_api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _gone(read: Any, *args: Any) -> bool:
    try:
        read(*args)
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_deployment_defaults_status_and_scale(session_api: client.ApiClient, ns: str) -> None:
    apps = client.AppsV1Api(session_api)
    body = {
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": POD_TEMPLATE},
    }
    dep = apps.create_namespaced_deployment(ns, body)
    assert dep.spec.replicas == 1 and dep.metadata.generation == 1
    assert dep.spec.strategy.type == "RollingUpdate"
    assert dep.spec.strategy.rolling_update.max_surge == "25%"
    assert dep.spec.revision_history_limit == 10 and dep.spec.progress_deadline_seconds == 600
    pod_spec = dep.spec.template.spec
    assert pod_spec.restart_policy == "Always" and pod_spec.dns_policy == "ClusterFirst"
    assert pod_spec.containers[0].image_pull_policy == "IfNotPresent"
    assert pod_spec.containers[0].ports[0].protocol == "TCP"
    scale = apps.read_namespaced_deployment_scale("web", ns)
    assert scale.spec.replicas == 1 and scale.status.selector == "app=web"
    apps.patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": 4}})
    dep = apps.read_namespaced_deployment("web", ns)
    assert dep.spec.replicas == 4 and dep.metadata.generation == 2
    apps.patch_namespaced_deployment_status("web", ns, {"status": {"replicas": 4, "readyReplicas": 4}})
    assert apps.read_namespaced_deployment("web", ns).status.ready_replicas == 4
    code, deleted = raw_request(session_api, "DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments/web")
    assert code == 200 and deleted["kind"] == "Status"  # no ReturnDeletedObject for apps


def test_pods_owned_by_replicaset_and_daemonset_live_until_owner_goes(
    session_api: client.ApiClient, ns: str
) -> None:
    apps, core = client.AppsV1Api(session_api), client.CoreV1Api(session_api)
    selector = {"matchLabels": {"app": "web"}}
    rs = apps.create_namespaced_replica_set(
        ns, {"metadata": {"name": "rs"}, "spec": {"selector": selector, "template": POD_TEMPLATE}}
    )
    ds = apps.create_namespaced_daemon_set(
        ns, {"metadata": {"name": "ds"}, "spec": {"selector": selector, "template": POD_TEMPLATE}}
    )
    assert ds.spec.update_strategy.rolling_update.max_unavailable == 1
    for owner, kind in ((rs, "ReplicaSet"), (ds, "DaemonSet")):
        ref = {"apiVersion": "apps/v1", "kind": kind, "name": owner.metadata.name, "uid": owner.metadata.uid,
               "controller": True}  # fmt: skip
        core.create_namespaced_pod(
            ns,
            {
                "metadata": {"name": f"{kind.lower()}-pod", "ownerReferences": [ref]},
                "spec": POD_TEMPLATE["spec"],
            },
        )
    # an owner of a kind nobody serves: the garbage collector cannot resolve it and leaves the pod
    alien = {"apiVersion": "example.com/v1", "kind": "Alien", "name": "a", "uid": "0000-alien"}
    core.create_namespaced_pod(
        ns, {"metadata": {"name": "alien-pod", "ownerReferences": [alien]}, "spec": POD_TEMPLATE["spec"]}
    )
    apps.delete_namespaced_replica_set("rs", ns)
    wait_until(lambda: _gone(core.read_namespaced_pod, "replicaset-pod", ns), 10, what="rs pod collected")
    assert core.read_namespaced_pod("daemonset-pod", ns).metadata.owner_references[0].kind == "DaemonSet"
    assert core.read_namespaced_pod("alien-pod", ns).metadata.name == "alien-pod"


def test_create_from_yaml_multi_document(session_api: client.ApiClient, ns: str, tmp_path: Path) -> None:
    docs = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "rb"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
         "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": ns}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": f"{ns}-cr"},
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb"},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}},
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "hpa"},
         "spec": {"maxReplicas": 5,
                  "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "np"},
         "spec": {"podSelector": {}}},
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "lease"},
         "spec": {"holderIdentity": "me"}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "sts"},
         "spec": {"serviceName": "sts", "selector": {"matchLabels": {"app": "web"}},
                  "template": POD_TEMPLATE}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job"},
         "spec": {"template": {"spec": JOB_POD}}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
         "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": JOB_POD}}}}},
        {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
         "spec": {"template": POD_TEMPLATE}},
    ]  # fmt: skip
    path = tmp_path / "all.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    utils.create_from_yaml(session_api, str(path), namespace=ns)
    rbac = client.RbacAuthorizationV1Api(session_api)
    assert rbac.read_namespaced_role_binding("rb", ns).role_ref.name == "r"
    assert rbac.read_cluster_role(f"{ns}-cr").rules[0].resources == ["nodes"]
    hpa = client.AutoscalingV2Api(session_api).read_namespaced_horizontal_pod_autoscaler("hpa", ns)
    assert hpa.spec.min_replicas == 1 and hpa.spec.metrics[0].resource.name == "cpu"
    np = client.NetworkingV1Api(session_api).read_namespaced_network_policy("np", ns)
    assert np.spec.policy_types == ["Ingress"]
    sts = client.AppsV1Api(session_api).read_namespaced_stateful_set("sts", ns)
    assert sts.spec.pod_management_policy == "OrderedReady" and sts.status.replicas == 0
    batch = client.BatchV1Api(session_api)
    job = batch.read_namespaced_job("job", ns)
    assert job.spec.backoff_limit == 6 and job.spec.completions == 1
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": job.metadata.uid}
    assert job.spec.template.metadata.labels["job-name"] == "job"
    assert batch.read_namespaced_cron_job("cj", ns).spec.concurrency_policy == "Allow"
    rc = client.CoreV1Api(session_api).read_namespaced_replication_controller("rc", ns)
    assert rc.spec.selector == {"app": "web"} and rc.spec.replicas == 1
    dyn = DynamicClient(session_api)
    leases = dyn.resources.get(api_version="coordination.k8s.io/v1", kind="Lease")
    assert leases.get(name="lease", namespace=ns).spec.holderIdentity == "me"
    pdbs = dyn.resources.get(api_version="policy/v1", kind="PodDisruptionBudget")
    assert pdbs.get(name="pdb", namespace=ns).status.disruptionsAllowed == 0


def test_apiservice_and_discovery(session_api: client.ApiClient) -> None:
    reg = client.ApiregistrationV1Api(session_api)
    name = "v1beta1.metrics.example.com"
    svc = reg.create_api_service(
        {"metadata": {"name": name}, "spec": {"group": "metrics.example.com", "version": "v1beta1",
                                              "groupPriorityMinimum": 100, "versionPriority": 100}}
    )  # fmt: skip
    assert svc.metadata.name == name
    reg.delete_api_service(name)
    groups = {g.name for g in client.ApisApi(session_api).get_api_versions().groups}
    wanted = {"apps", "batch", "rbac.authorization.k8s.io", "apiregistration.k8s.io", "policy",
              "autoscaling", "networking.k8s.io", "coordination.k8s.io", "authorization.k8s.io"}  # fmt: skip
    assert wanted <= groups
    core = {r.name: r for r in client.CoreV1Api(session_api).get_api_resources().resources}
    assert core["serviceaccounts/token"].verbs == ["create"]
    assert core["replicationcontrollers/scale"].kind == "Scale"


def test_service_defaults_status_and_delete_returns_object(session_api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(session_api)
    svc = core.create_namespaced_service(ns, {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    assert svc.spec.type == "ClusterIP" and svc.spec.session_affinity == "None"
    assert svc.spec.cluster_ip and svc.spec.cluster_ips == [svc.spec.cluster_ip]
    assert svc.spec.ports[0].protocol == "TCP" and svc.spec.ports[0].target_port == 80
    assert svc.spec.ip_families == ["IPv4"] and svc.status.load_balancer is not None
    np = core.create_namespaced_service(
        ns, {"metadata": {"name": "np"}, "spec": {"type": "NodePort", "ports": [{"port": 81}]}}
    )
    assert 30000 <= np.spec.ports[0].node_port <= 32767 and np.spec.cluster_ip != svc.spec.cluster_ip
    replaced = core.replace_namespaced_service(
        "s", ns, {"metadata": {"name": "s", "labels": {"a": "b"}}, "spec": {"ports": [{"port": 80}]}}
    )
    assert replaced.spec.cluster_ip == svc.spec.cluster_ip  # allocated values carry over
    code, body = raw_request(session_api, "DELETE", f"/api/v1/namespaces/{ns}/services/s")
    assert code == 200 and body["kind"] == "Service"


def test_secret_string_data_is_folded_into_data(session_api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(session_api)
    sec = core.create_namespaced_secret(
        ns, {"metadata": {"name": "s"}, "data": {"a": "eA=="}, "stringData": {"a": "y", "b": "z"}}
    )
    assert sec.type == "Opaque" and sec.string_data is None
    assert {k: base64.b64decode(v).decode() for k, v in sec.data.items()} == {"a": "y", "b": "z"}
    sec = core.patch_namespaced_secret("s", ns, {"stringData": {"c": "w"}})
    assert base64.b64decode(sec.data["c"]).decode() == "w" and len(sec.data) == 3
