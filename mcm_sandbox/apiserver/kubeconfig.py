"""The kubeconfig the sandbox writes, so kubectl and the official client need nothing else."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml


def kubeconfig(
    server: str, token: str = "", name: str = "sandbox", namespace: str = "default"
) -> dict[str, Any]:
    user: dict[str, Any] = {"token": token} if token else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: str, token: str = "", name: str = "sandbox") -> None:
    """Write atomically: a poller that sees the file must see all of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(kubeconfig(server, token, name), sort_keys=False))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
