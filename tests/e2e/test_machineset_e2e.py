"""End to end in the sandbox (``mcm_sandbox.runner.up``): a MachineSet scaled 0 → 1 → 6 → 2 with
real worker processes, the informer and the kubelet simulator; machines, VMs and Nodes follow, the
extra ones are drained and deleted; deleting the set leaves none behind."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes.client import ApiClient

from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.kube import ops
from providers.local import LocalCloud
from tests.e2e.support import connected, running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

NS = "default"
WAIT = 90.0
#: compressed time and the reconcilers every process serves
ENV = {
    "MCM_RECONCILER_MODULES": ",".join(
        (
            "mcm_tasks.controllers.machine.register",
            "mcm_tasks.controllers.machine.register_termination",
            "mcm_tasks.controllers.machineset.register",
        )
    ),
    "MCM_LONG_RETRY": "20s",
    "MCM_MACHINE_DRAIN_TIMEOUT": "30s",
}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(Path(tmp_path_factory.mktemp("ms-e2e")), ENV, with_beat=False) as started:
        yield started


@pytest.fixture(scope="module")
def clients(sandbox: Sandbox) -> Iterator[tuple[ApiClient, ApiClient, redis.Redis]]:
    with connected(sandbox) as made:
        yield made


def machines(api: ApiClient) -> list[dict[str, Any]]:
    return list(ops.list_(api, kinds.MACHINE.resource, NS)["items"])


def running(api: ApiClient) -> int:
    return sum(
        1
        for m in machines(api)
        if (m.get("status") or {}).get("currentStatus", {}).get("phase") == "Running"
        and not m["metadata"].get("deletionTimestamp")
    )


def nodes(api: ApiClient) -> int:
    return len(ops.list_(api, kinds.NODE.resource)["items"])


def live_vms(client: redis.Redis) -> int:
    return sum(1 for vm in LocalCloud(client).all() if vm.live())


def observe(control: ApiClient, target: ApiClient, client: redis.Redis) -> dict[str, Any]:
    """What the test waits on, in one place, so that a timeout can say where things stood."""
    found = ops.get(control, kinds.MACHINE_SET.resource, "e2e", NS, missing_ok=True)
    return {
        "set": None if found is None else (found.get("status") or {}).get("readyReplicas", 0),
        "machines": len(machines(control)),
        "running": running(control),
        "nodes": nodes(target),
        "vms": live_vms(client),
    }


def wait_for(
    control: ApiClient, target: ApiClient, client: redis.Redis, want: dict[str, Any], what: str
) -> None:
    last: dict[str, Any] = {}

    def reached() -> bool:
        last.update(observe(control, target, client))
        return all(last[k] == v for k, v in want.items())

    try:
        wait_until(reached, WAIT, what=what)
    except TimeoutError as err:
        raise AssertionError(f"{what}: wanted {want}, last seen {last}") from err


def test_machineset_scales_0_1_6_2_and_deletion_cleans_up(
    clients: tuple[ApiClient, ApiClient, redis.Redis],
) -> None:
    control, target, client = clients
    user_data = base64.b64encode(b"#!/bin/sh\necho <<MACHINE_NAME>>\n").decode()
    ops.create(
        control,
        kinds.SECRET.resource,
        {"metadata": {"name": "e2e-secret", "namespace": NS}, "data": {"userData": user_data}},
    )
    ops.create(
        control,
        kinds.MACHINE_CLASS.resource,
        {
            "apiVersion": API_VERSION,
            "kind": "MachineClass",
            "metadata": {"name": "e2e-class", "namespace": NS},
            "provider": "local",
            "providerSpec": {},
            "secretRef": {"name": "e2e-secret", "namespace": NS},
        },
    )
    ops.create(
        control,
        kinds.MACHINE_SET.resource,
        {
            "apiVersion": API_VERSION,
            "kind": "MachineSet",
            "metadata": {"name": "e2e", "namespace": NS},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "e2e"}},
                "template": {
                    "metadata": {"labels": {"app": "e2e"}},
                    "spec": {"class": {"kind": "MachineClass", "name": "e2e-class"}},
                },
            },
        },
    )
    timings: dict[str, float] = {}
    for replicas in (1, 6, 2):
        started = time.monotonic()
        ops.patch(
            control,
            kinds.MACHINE_SET.resource,
            "e2e",
            {"spec": {"replicas": replicas}},
            NS,
            subresource="scale",
        )
        want = {"machines": replicas, "running": replicas, "nodes": replicas, "vms": replicas}
        wait_for(control, target, client, want, f"{replicas} machines Running with their VMs and Nodes")
        timings[f"to_{replicas}"] = round(time.monotonic() - started, 2)
        wait_for(control, target, client, {"set": replicas}, f"status readyReplicas {replicas}")
    started = time.monotonic()
    ops.delete(control, kinds.MACHINE_SET.resource, "e2e", NS)
    gone = {"set": None, "machines": 0, "nodes": 0, "vms": 0}
    wait_for(control, target, client, gone, "the set, its machines, VMs and Nodes gone")
    timings["delete"] = round(time.monotonic() - started, 2)
    print(f"machineset e2e seconds: {timings}")
