"""The MachineDeployment harness (tests/machinedeployment_support.py) against the sandbox API server
and a real Redis, for the tests that need the API server itself: its fault injection, its validation
of names, and a live informer watching it. The other MachineDeployment tests run the same harness on
the recording fake, in tests/unit/.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes.client import ApiClient

from mcm_sandbox.crds import install_crds
from mcm_sandbox.procs import ApiServer
from mcm_tasks import kinds
from mcm_tasks.kube import ops
from mcm_tasks.kube.clients import get_clusters, reset_clusters
from mcm_tasks.settings import configure, reset_settings
from tests.machinedeployment_support import (
    LABELS,
    SETTINGS,
    Obj,
    World,
    _annotations,
    _joined,
    _local_class,
    _mcm_protected,
    _node_names,
    deployment_body,
    template,
)

__all__ = ["LABELS", "Obj", "World", "_annotations", "_joined", "_local_class", "_mcm_protected",
           "_node_names", "deployment_body", "template", "world"]  # fmt: skip


@pytest.fixture()
def world(apiserver: ApiServer, kube_api: ApiClient, redis_url: str) -> Iterator[World]:
    install_crds(kube_api)
    namespace = f"mcd-{uuid.uuid4().hex[:8]}"
    configure(
        {**SETTINGS, "redis_url": redis_url, "namespace": namespace,
         "control_kubeconfig": str(apiserver.kubeconfig), "target_kubeconfig": str(apiserver.kubeconfig)}
    )  # fmt: skip
    reset_clusters()
    api = get_clusters().control.api
    ops.create(api, kinds.NAMESPACE.resource, {"metadata": {"name": namespace}})
    yield World(api, namespace)
    reset_clusters()
    reset_settings()
