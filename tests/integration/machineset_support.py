"""The MachineSet harness (tests/machineset_support.py) against the sandbox API server and a real
Redis, for the tests that need the API server itself: its fault injection (a create or a delete
refused with a 500, test_machineset_api_faults.py). The MachineSet's other tests (scaling, status,
claiming, preservation) run the same harness on the recording fake, in tests/unit/.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from kubernetes.client import ApiClient

from mcm_sandbox.crds import install_crds
from mcm_sandbox.procs import ApiServer
from mcm_tasks import kinds
from mcm_tasks.kube import ops
from mcm_tasks.kube.clients import reset_clusters
from mcm_tasks.settings import configure, reset_settings
from tests.machineset_support import HOLD
from tests.machineset_support import Harness as FakeHarness

__all__ = ["HOLD", "Harness", "crds", "harness"]


@dataclass
class Harness(FakeHarness):
    """The harness on the sandbox API server, with its fault injection."""

    apiserver: ApiServer | None = None

    def fault(self, **rule: Any) -> str:
        req = urllib.request.Request(
            f"{self._url()}/sandbox/faults",
            data=json.dumps(rule).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            return str(json.loads(resp.read())["id"])

    def clear_fault(self, rule_id: str) -> None:
        req = urllib.request.Request(f"{self._url()}/sandbox/faults/{rule_id}", method="DELETE")
        urllib.request.urlopen(req, timeout=5).close()

    def _url(self) -> str:
        assert self.apiserver is not None
        return self.apiserver.url


@pytest.fixture(scope="module")
def crds(apiserver: ApiServer) -> ApiServer:
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(apiserver.kubeconfig))
    install_crds(api)
    api.close()
    return apiserver


@pytest.fixture()
def harness(crds: ApiServer, kube_api: ApiClient, redis_url: str) -> Iterator[Harness]:
    ns = f"ms-{uuid.uuid4().hex[:8]}"
    ops.create(kube_api, kinds.NAMESPACE.resource, {"metadata": {"name": ns}})
    configure(
        {
            "control_kubeconfig": str(crds.kubeconfig),
            "target_kubeconfig": "none",
            "redis_url": redis_url,
            "namespace": ns,
            "kube_api_qps": 500,
            "kube_api_burst": 500,
        }
    )
    reset_clusters()
    client = redis.Redis.from_url(redis_url)
    try:
        yield Harness(kube_api, ns, client, apiserver=crds)
    finally:
        client.close()
        reset_clusters()
        reset_settings()
