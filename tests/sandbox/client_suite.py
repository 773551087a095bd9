"""A private sandbox per test module for the client-suite ports (no tests here).

The kubernetes-client/python e2e suite works in the ``default`` namespace under fixed names
(``nginx-app``, ``mock``, ``triple-nginx``) and expects a cluster it has to itself; a module-scoped
sandbox gives each ported module exactly that, so the session server's other tests and these never
see each other's objects.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from mcm_sandbox.procs import ApiServer, wait_until

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests" / "client-suite"


@pytest.fixture(scope="module", name="suite_api")
def suite_api_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.ApiClient]:
    server = ApiServer(tmp_path_factory.mktemp("client-suite")).start()
    api = config.new_client_from_config(config_file=str(server.kubeconfig))
    yield api
    api.close()
    server.stop()


def manifest(name: str) -> str:
    return str(MANIFESTS / name)


def gone(read: object, *args: str) -> bool:
    """True once ``read(*args)`` answers 404 (for deletions that finish after the response)."""
    try:
        read(*args)  # type: ignore[operator]
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def wait_gone(read: object, *args: str) -> None:
    wait_until(lambda: gone(read, *args), 15, what=f"{args} deleted")
