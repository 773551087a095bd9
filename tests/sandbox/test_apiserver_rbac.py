"""RBAC enforcement (``--authorization-mode RBAC``): service-account tokens, Roles and bindings,
kube-apiserver's 403 wording, access reviews and impersonation, through the official client."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from mcm_sandbox.apiserver.kubeconfig import service_account_kubeconfig, service_account_token
from mcm_sandbox.procs import ApiServer, wait_until
from tests.sandbox.apiserver_support import raw_request, status_of, unique

pytestmark = pytest.mark.integration
RBAC = "rbac.authorization.k8s.io"


@pytest.fixture(scope="module")
def rbac_server(workdir: Path) -> Iterator[ApiServer]:
    server = ApiServer(workdir / "apiserver-rbac", extra_args=["--authorization-mode", "RBAC"]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def admin(rbac_server: ApiServer) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(rbac_server.kubeconfig))
    yield api
    api.close()


@pytest.fixture()
def ns(admin: client.ApiClient) -> str:
    name = unique("rbac")
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": name}})
    return name


def _as_token(admin: client.ApiClient, token: str) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = admin.configuration.host
    cfg.ssl_ca_cert = admin.configuration.ssl_ca_cert
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


def _admin_auth(admin: client.ApiClient) -> dict[str, str]:
    return {"Authorization": admin.configuration.auth_settings()["BearerToken"]["value"]}


def _forbidden(call: Any, *args: Any) -> dict[str, Any]:
    with pytest.raises(client.ApiException) as info:
        call(*args)
    assert info.value.status == 403, info.value.body
    return status_of(info.value)


def _bind(admin: client.ApiClient, ns: str, sa: str, rules: list[dict[str, Any]], name: str = "r") -> None:
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(ns, {"metadata": {"name": name}, "rules": rules})
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
        },
    )


def test_service_account_token_is_forbidden_until_bound(rbac_server: ApiServer, admin: Any, ns: str) -> None:
    token = service_account_token(rbac_server.kubeconfig, ns, "robot")
    robot = client.CoreV1Api(_as_token(admin, token))
    body = _forbidden(robot.list_namespaced_pod, ns)
    user = f"system:serviceaccount:{ns}:robot"
    assert body["message"] == (
        f'pods is forbidden: User "{user}" cannot list resource "pods" in API group "" '
        f'in the namespace "{ns}"'
    )
    assert body["reason"] == "Forbidden" and body["details"] == {"kind": "pods"}
    assert list(body) == ["kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code"]
    _bind(admin, ns, "robot", [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["mine"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    ])  # fmt: skip
    assert robot.list_namespaced_pod(ns).items == []
    core = client.CoreV1Api(admin)
    for name in ("mine", "theirs"):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name}})
    assert robot.read_namespaced_config_map("mine", ns).metadata.name == "mine"
    body = _forbidden(robot.read_namespaced_config_map, "theirs", ns)
    assert body["message"].startswith('configmaps "theirs" is forbidden: User')
    body = _forbidden(robot.list_node)
    assert body["message"].endswith('cannot list resource "nodes" in API group "" at the cluster scope')
    robot.create_namespaced_pod(
        ns, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )
    robot.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Running"}})
    body = _forbidden(robot.patch_namespaced_pod, "p", ns, {"metadata": {"labels": {"a": "b"}}})
    assert 'cannot patch resource "pods" in API group ""' in body["message"]


def test_cluster_role_binding_and_aggregation(rbac_server: ApiServer, admin: Any, ns: str) -> None:
    token = service_account_token(rbac_server.kubeconfig, ns, "agg")
    apps = client.AppsV1Api(_as_token(admin, token))
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_cluster_role(
        {"metadata": {"name": f"{ns}-agg"}, "rules": [],
         "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {f"{ns}/agg": "true"}}]}}
    )  # fmt: skip
    rbac.create_cluster_role_binding(
        {"metadata": {"name": f"{ns}-agg"},
         "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": f"{ns}-agg"},
         "subjects": [{"kind": "ServiceAccount", "name": "agg", "namespace": ns}]}
    )  # fmt: skip
    _forbidden(apps.list_deployment_for_all_namespaces)
    rbac.create_cluster_role(
        {"metadata": {"name": f"{ns}-part", "labels": {f"{ns}/agg": "true"}},
         "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}]}
    )  # fmt: skip
    assert apps.list_deployment_for_all_namespaces().items is not None


def test_missing_role_is_named_in_the_reason(rbac_server: ApiServer, admin: Any, ns: str) -> None:
    token = service_account_token(rbac_server.kubeconfig, ns, "lost")
    client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(
        ns,
        {"metadata": {"name": "dangling"}, "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "nope"},
         "subjects": [{"kind": "ServiceAccount", "name": "lost", "namespace": ns}]},
    )  # fmt: skip
    body = _forbidden(client.CoreV1Api(_as_token(admin, token)).list_namespaced_secret, ns)
    assert body["message"].endswith(f'in the namespace "{ns}": RBAC: role.{RBAC} "nope" not found')


def test_tokens_stop_working_when_their_account_or_secret_goes(
    rbac_server: ApiServer, admin: Any, ns: str
) -> None:
    core = client.CoreV1Api(admin)
    token = service_account_token(rbac_server.kubeconfig, ns, "short")
    core.create_namespaced_secret(
        ns,
        {"metadata": {"name": "legacy", "annotations": {"kubernetes.io/service-account.name": "short"}},
         "type": "kubernetes.io/service-account-token"},
    )  # fmt: skip
    secret = core.read_namespaced_secret("legacy", ns)
    legacy = base64.b64decode(secret.data["token"]).decode()
    assert secret.metadata.annotations["kubernetes.io/service-account.uid"]
    assert base64.b64decode(secret.data["namespace"]).decode() == ns
    for tok in (token, legacy):
        review = client.AuthorizationV1Api(_as_token(admin, tok)).create_self_subject_access_review(
            {"spec": {"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": ns}}}
        )
        assert review.status.allowed is False
    core.delete_namespaced_secret("legacy", ns)
    code, body = raw_request(
        _as_token(admin, legacy), "GET", "/api", headers={"Authorization": f"Bearer {legacy}"}
    )
    assert code == 401 and body["reason"] == "Unauthorized"
    core.delete_namespaced_service_account("short", ns)
    code, _ = raw_request(admin, "GET", "/api", headers={"Authorization": f"Bearer {token}"})
    assert code == 401
    code, _ = raw_request(admin, "GET", "/api", headers={"Authorization": "Bearer forged"})
    assert code == 401


def test_anonymous_and_non_resource_paths(admin: Any) -> None:
    code, body = raw_request(admin, "GET", "/apis", headers={"Authorization": ""})
    assert code == 403
    assert body["message"] == 'forbidden: User "system:anonymous" cannot get path "/apis"'
    code, body = raw_request(admin, "GET", "/api/v1/namespaces/default/pods", headers={"Authorization": ""})
    assert code == 403 and 'User "system:anonymous" cannot list resource "pods"' in body["message"]
    code, _ = raw_request(admin, "GET", "/version", headers={"Authorization": ""})
    assert code == 200


def test_access_reviews_and_impersonation(rbac_server: ApiServer, admin: Any, ns: str) -> None:
    token = service_account_token(rbac_server.kubeconfig, ns, "seer")
    _bind(
        admin, ns, "seer", [{"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["update"]}]
    )
    authz = client.AuthorizationV1Api(admin)
    sar = authz.create_subject_access_review(
        {"spec": {"user": f"system:serviceaccount:{ns}:seer", "groups": ["system:serviceaccounts"],
                  "resourceAttributes": {"namespace": ns, "verb": "update", "group": "apps",
                                         "resource": "deployments", "subresource": "scale"}}}
    )  # fmt: skip
    assert sar.status.allowed and sar.status.reason.startswith('RBAC: allowed by RoleBinding "r"')
    seer = client.AuthorizationV1Api(_as_token(admin, token))
    rules = seer.create_self_subject_rules_review({"spec": {"namespace": ns}}).status.resource_rules
    assert any(r.resources == ["deployments/scale"] for r in rules)
    who = client.AuthenticationV1Api(_as_token(admin, token)).create_self_subject_review({})
    assert who.status.user_info.username == f"system:serviceaccount:{ns}:seer"
    path = f"/api/v1/namespaces/{ns}/pods"
    as_seer = {**_admin_auth(admin), "Impersonate-User": f"system:serviceaccount:{ns}:seer"}
    code, body = raw_request(admin, "GET", path, headers=as_seer)
    assert code == 403 and f'User "system:serviceaccount:{ns}:seer" cannot list' in body["message"]
    code, body = raw_request(_as_token(admin, token), "GET", path, headers={
        "Authorization": f"Bearer {token}", "Impersonate-User": "kubernetes-admin"})  # fmt: skip
    assert code == 403 and body["message"] == (
        f'users "kubernetes-admin" is forbidden: User "system:serviceaccount:{ns}:seer" cannot impersonate '
        'resource "users" in API group "" at the cluster scope'
    )


def test_helper_writes_a_service_account_kubeconfig(
    rbac_server: ApiServer, admin: Any, ns: str, tmp_path: Path
) -> None:
    path = service_account_kubeconfig(rbac_server.kubeconfig, ns, "kc", tmp_path / "kc")
    api = config.new_client_from_config(config_file=str(path))
    _forbidden(client.CoreV1Api(api).list_namespaced_pod, ns)
    _bind(admin, ns, "kc", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}])
    wait_until(lambda: client.CoreV1Api(api).list_namespaced_pod(ns).items == [], 5, what="allowed")
    api.close()


def test_no_escalation_through_roles_or_bindings(rbac_server: ApiServer, admin: Any, ns: str) -> None:
    token = service_account_token(rbac_server.kubeconfig, ns, "granter")
    _bind(admin, ns, "granter", [
        {"apiGroups": [RBAC], "resources": ["roles", "rolebindings"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ])  # fmt: skip
    granter = client.RbacAuthorizationV1Api(_as_token(admin, token))
    granter.create_namespaced_role(  # what it holds, it may grant
        ns,
        {
            "metadata": {"name": "pods-get"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
    )
    body = _forbidden(
        granter.create_namespaced_role,
        ns,
        {
            "metadata": {"name": "secrets"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
        },
    )
    user = f"system:serviceaccount:{ns}:granter"
    assert body["message"] == (
        f'roles.{RBAC} "secrets" is forbidden: user "{user}" (groups=["system:serviceaccounts" '
        f'"system:serviceaccounts:{ns}" "system:authenticated"]) is attempting to grant RBAC permissions not '
        'currently held:\n{APIGroups:[""], Resources:["secrets"], Verbs:["list"]}'
    )
    binding = {"metadata": {"name": "admin"}, "subjects": [{"kind": "User", "name": "mallory"}],
               "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "cluster-admin"}}  # fmt: skip
    assert (
        "is attempting to grant RBAC permissions"
        in _forbidden(granter.create_namespaced_role_binding, ns, binding)["message"]
    )
    binding["roleRef"] = {"apiGroup": RBAC, "kind": "Role", "name": "pods-get"}
    granter.create_namespaced_role_binding(ns, binding)  # binding what it holds is fine
