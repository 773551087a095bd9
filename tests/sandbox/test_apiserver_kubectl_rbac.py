"""kubectl against an RBAC-enforcing sandbox (``--authorization-mode RBAC``, which also serves TLS:
kubectl sends credentials only over https): auth can-i, create token, whoami, a 403 in kube's words."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from mcm_sandbox.procs import ApiServer
from tests.sandbox.apiserver_support import kubectl_runner, unique

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def rbac_server(workdir: Path) -> Iterator[ApiServer]:
    server = ApiServer(
        workdir / "apiserver-rbac-kubectl", extra_args=["--authorization-mode", "RBAC"]
    ).start()
    yield server
    server.stop()


def test_auth_can_i_and_create_token_with_rbac(rbac_server: ApiServer, tmp_path: Path) -> None:
    admin = kubectl_runner(rbac_server.kubeconfig, tmp_path / "cache")
    ns = unique("can")
    admin("create", "namespace", ns)
    admin("create", "serviceaccount", "robot", "-n", ns)
    assert admin("auth", "can-i", "delete", "nodes").strip() == "yes"
    as_robot = ["--as", f"system:serviceaccount:{ns}:robot"]
    assert admin("auth", "can-i", "list", "pods", "-n", ns, *as_robot, check=False).strip() == "no"
    admin("create", "role", "lister", "--verb=list", "--resource=pods", "-n", ns)
    admin("create", "rolebinding", "lister", "--role=lister", f"--serviceaccount={ns}:robot", "-n", ns)
    assert admin("auth", "can-i", "list", "pods", "-n", ns, *as_robot).strip() == "yes"
    assert admin("auth", "can-i", "list", "pods", "-n", "default", *as_robot, check=False).strip() == "no"
    token = admin("create", "token", "robot", "-n", ns).strip()
    config = yaml.safe_load(rbac_server.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    robot_config = tmp_path / "robot"
    robot_config.write_text(yaml.safe_dump(config))
    robot = kubectl_runner(robot_config, tmp_path / "cache-robot")
    assert "No resources found" in robot("get", "pods", "-n", ns, with_stderr=True)
    denied = robot("get", "secrets", "-n", ns, check=False)
    assert (
        f'secrets is forbidden: User "system:serviceaccount:{ns}:robot" cannot list resource "secrets" '
        f'in API group "" in the namespace "{ns}"'
    ) in denied
    assert (
        robot("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
        == f"system:serviceaccount:{ns}:robot"
    )
    rules = robot("auth", "can-i", "--list", "-n", ns)
    assert "pods" in rules and "selfsubjectaccessreviews.authorization.k8s.io" in rules
