"""The kubeconfig the sandbox writes, so kubectl and the official client need nothing else."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml


def kubeconfig(
    server: str, token: str = "", name: str = "sandbox", namespace: str = "default", ca_pem: bytes = b""
) -> dict[str, Any]:
    user: dict[str, Any] = {"token": token} if token else {}
    cluster: dict[str, Any] = {"server": server}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(
    path: Path, server: str, token: str = "", name: str = "sandbox", ca_pem: bytes = b""
) -> None:
    """Write atomically: a poller that sees the file must see all of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(kubeconfig(server, token, name, ca_pem=ca_pem), sort_keys=False))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def service_account_token(
    admin_kubeconfig: Path, namespace: str, name: str, expiration_seconds: int = 3600, create: bool = True
) -> str:
    """A bearer token for a ServiceAccount (TokenRequest, as ``kubectl create token``), for tests that
    run a component as that account; the account is created first when missing and ``create``."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(admin_kubeconfig))
    try:
        core = client.CoreV1Api(api)
        if create:
            try:
                core.create_namespaced_service_account(
                    namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
                )
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
        )
        issued = core.create_namespaced_service_account_token(name, namespace, request)
        assert issued.status is not None
        return str(issued.status.token)
    finally:
        api.close()


def service_account_kubeconfig(
    admin_kubeconfig: Path, namespace: str, name: str, out: Path, expiration_seconds: int = 86400
) -> Path:
    """A kubeconfig that authenticates as ``system:serviceaccount:{namespace}:{name}``."""
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    ca = base64.b64decode(cluster.get("certificate-authority-data", ""))
    token = service_account_token(admin_kubeconfig, namespace, name, expiration_seconds)
    out.parent.mkdir(parents=True, exist_ok=True)
    config = kubeconfig(cluster["server"], token, name=f"{namespace}-{name}", namespace=namespace, ca_pem=ca)
    out.write_text(yaml.safe_dump(config))
    os.chmod(out, 0o600)
    return out
