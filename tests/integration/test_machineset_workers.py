"""The MachineSet controller served by real Celery worker processes, woken by the real informer.

Two workers (``machineset`` queue only, so machines stay bare objects; a thread of the test
removes the MCM finalizer of deleted machines in the machine controller's stead), the informer in a thread of
the test with its real queue sink (expectations included), the sandbox API server and a real Redis.
A watcher samples the machine count throughout: scaling 0 → 1 → 6 → 2 never overshoots, although
several reconciles race with a cache that lags behind their own creations.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from informers.sink import QueueSink
from mcm_sandbox.procs import ApiServer, ManagedProcess, wait_until
from mcm_sandbox.testing.informers import InformerThread, sandbox_settings
from mcm_sandbox.testing.standins import finish_deletions
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.api.constants import MCM_FINALIZER
from mcm_tasks.kube import ops
from mcm_tasks.kube.clients import reset_clusters
from mcm_tasks.settings import configure, reset_settings

pytestmark = pytest.mark.integration

WAIT = 45.0
WORKERS = 2


@pytest.fixture()
def namespace(crds: ApiServer, kube_api: ApiClient) -> str:
    name = f"msw-{uuid.uuid4().hex[:8]}"
    ops.create(kube_api, kinds.NAMESPACE.resource, {"metadata": {"name": name}})
    return name


@pytest.fixture()
def workers(
    crds: ApiServer, redis_url: str, namespace: str, tmp_path: Path
) -> Iterator[list[ManagedProcess]]:
    env = {
        **os.environ,
        "MCM_REDIS_URL": redis_url,
        "MCM_CONTROL_KUBECONFIG": str(crds.kubeconfig),
        "MCM_TARGET_KUBECONFIG": "none",
        "MCM_NAMESPACE": namespace,
        "MCM_RECONCILER_MODULES": "mcm_tasks.controllers.machineset.register",
        "MCM_KUBE_API_QPS": "500",
        "MCM_KUBE_API_BURST": "500",
        "MCM_ERROR_BACKOFF_MAX": "1",
    }
    procs = []
    for i in range(WORKERS):
        proc = ManagedProcess(
            [sys.executable, "-m", "mcm_tasks.worker_cli", "worker", "--queues", "machineset",
             "--concurrency", "1", "--loglevel", "warning", "--hostname", f"msw{i}@%h"],
            tmp_path / f"worker{i}.log",
            env=env,
        )  # fmt: skip
        proc.start()
        procs.append(proc)
    try:
        yield procs
    finally:
        for proc in procs:
            proc.stop()


@pytest.fixture()
def informer(crds: ApiServer, redis_url: str, namespace: str) -> Iterator[InformerThread]:
    configure({"redis_url": redis_url, "namespace": namespace, "control_kubeconfig": str(crds.kubeconfig)})
    settings = sandbox_settings(crds.kubeconfig, redis_url, namespace)
    try:
        with InformerThread(settings, sink=QueueSink()) as running:
            wait_until(running.synced, WAIT, what="informer synced")
            yield running
    finally:
        reset_clusters()
        reset_settings()


@pytest.fixture()
def finisher(kube_api: ApiClient, namespace: str) -> Iterator[None]:
    """The machine controller's last deletion step (``finish_deletions``), which these workers do not
    serve: machines are created with the MCM finalizer, so a deleted one waits for it."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            with contextlib.suppress(ApiException):
                finish_deletions(kube_api, namespace)
            stop.wait(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


class Watcher:
    """Samples the number of (non-deleting) machines of a set until stopped; keeps the maximum."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.limit = 0
        self.overshoots: list[tuple[int, int]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            items = ops.list_(self.api, kinds.MACHINE.resource, self.namespace)["items"]
            live = sum(1 for m in items if not m["metadata"].get("deletionTimestamp"))
            if live > self.limit:
                self.overshoots.append((live, self.limit))
            self.samples += 1
            self._stop.wait(0.02)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def count(api: ApiClient, namespace: str) -> int:
    return len(ops.list_(api, kinds.MACHINE.resource, namespace)["items"])


@pytest.mark.usefixtures("finisher")
def test_workers_scale_0_1_6_2_without_overshooting(
    kube_api: ApiClient, namespace: str, workers: list[ManagedProcess], informer: InformerThread
) -> None:
    ops.create(
        kube_api,
        kinds.MACHINE_SET.resource,
        {
            "apiVersion": API_VERSION,
            "kind": "MachineSet",
            "metadata": {"name": "q", "namespace": namespace},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "q"}},
                "template": {
                    "metadata": {"labels": {"app": "q"}},
                    "spec": {"class": {"kind": "MachineClass", "name": "cls"}},
                },
            },
        },
    )

    def finalized() -> bool:
        found = ops.get(kube_api, kinds.MACHINE_SET.resource, "q", namespace) or {}
        return MCM_FINALIZER in found.get("metadata", {}).get("finalizers", [])

    wait_until(finalized, WAIT, what="the workers to reconcile the new set")
    with Watcher(kube_api, namespace) as watcher:
        for replicas in (1, 6, 2):
            # raise the limit before scaling up, lower it only once the scale-down is done
            watcher.limit = max(watcher.limit, replicas)
            ops.patch(
                kube_api,
                kinds.MACHINE_SET.resource,
                "q",
                {"spec": {"replicas": replicas}},
                namespace,
                subresource="scale",
            )
            wait_until(lambda n=replicas: count(kube_api, namespace) == n, WAIT, what=f"{replicas} machines")  # type: ignore[misc]
            watcher.limit = replicas

        def status_current() -> bool:
            status = (ops.get(kube_api, kinds.MACHINE_SET.resource, "q", namespace) or {}).get("status") or {}
            return status.get("replicas") == 2

        wait_until(status_current, WAIT, what="status.replicas 2")
    assert watcher.samples > 3
    assert watcher.overshoots == []
    for proc in workers:
        assert proc.alive(), proc.log_tail()
