"""The kubelet simulator tests' API server (one per module) and its official client; fixtures
registered by tests/sandbox/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import config
from kubernetes.client import ApiClient

from mcm_sandbox.procs import ApiServer


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    server = ApiServer(
        tmp_path_factory.mktemp("target"), name="target", extra_args=["--pod-grace-mode", "kubelet"]
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture()
def api(target: ApiServer) -> Iterator[ApiClient]:
    api = config.new_client_from_config(config_file=str(target.kubeconfig))
    yield api
    api.close()
