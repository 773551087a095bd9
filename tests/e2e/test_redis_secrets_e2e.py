"""No secret in Redis (issue 17): a full machine lifecycle in the sandbox (a MachineDeployment scaled
up and deleted, an orphan VM collected by beat's safety job, a secret edited under a running pool),
then every key of every type in Redis (the mirror, queues, kombu's task messages and unacked
hashes, task history, events, locks, permits, rate limits) is searched for the secret's values,
raw and base64, and none is found."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes.client import ApiClient

from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import Sandbox
from mcm_sandbox.testing.keyspace import search
from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineClass
from mcm_tasks.kube import ops
from providers.driver import CreateMachineRequest, Secret
from providers.local import LocalCloud, LocalDriver
from tests.e2e.pools import create_pool, running
from tests.e2e.support import connected, running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

NS = "default"
WAIT = 90.0
USER_DATA_MARKER = "userdata-marker-5e1f0c9a77"
CREDENTIAL = "credential-marker-9b3c2d41e8"
EDITED = "edited-marker-0a4471f3bc"
ENV = {
    "MCM_LONG_RETRY": "10s",
    "MCM_CLASS_RESYNC_PERIOD": "10s",
    "MCM_MACHINE_DRAIN_TIMEOUT": "10s",
    "MCM_MACHINE_SAFETY_ORPHAN_VMS_PERIOD": "2s",
    "MCM_SAFETY_EVENT_MIN_INTERVAL": "0",
}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(Path(tmp_path_factory.mktemp("secrets-e2e")), ENV, with_beat=True) as started:
        yield started


@pytest.fixture(scope="module")
def clients(sandbox: Sandbox) -> Iterator[tuple[ApiClient, ApiClient, redis.Redis]]:
    with connected(sandbox) as made:
        yield made


def live_vms(client: redis.Redis) -> list[Any]:
    return [vm for vm in LocalCloud(client).all() if vm.live()]


def test_no_secret_value_anywhere_in_redis_after_a_full_lifecycle(
    sandbox: Sandbox, clients: tuple[ApiClient, ApiClient, redis.Redis]
) -> None:
    control, _, client = clients
    user_data = f"#!/bin/sh\necho {USER_DATA_MARKER} <<MACHINE_NAME>>\n"
    data = {"userData": b64(user_data), "providerSecretAccessKey": b64(CREDENTIAL)}
    secret = {
        # what `kubectl apply` leaves behind: the whole object, data included, in an annotation
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": str({"data": data})}
        },
        "data": data,
    }
    create_pool(control, "scan", 3, secret=secret)
    wait_until(lambda: running(control) == 3, WAIT, interval=0.3, what="3 machines Running")

    # the data changes under the running pool: the class is woken, nothing of the new value is kept
    edited = {**data, "providerSecretAccessKey": b64(EDITED)}
    ops.patch(control, kinds.SECRET.resource, "scan-secret", {"data": edited}, NS)

    # an orphan VM: beat's safety job lists the class's VMs with its credentials and deletes it
    klass = MachineClass.model_validate(ops.get(control, kinds.MACHINE_CLASS.resource, "scan-class", NS))
    stub = Machine.model_validate({"metadata": {"name": "scan-orphan", "namespace": NS}})
    LocalDriver(sandbox.redis_url).create_machine(
        CreateMachineRequest(machine=stub, machine_class=klass, secret=Secret(data={"userData": b"x"}))
    )
    wait_until(
        lambda: not any(vm.machine == "scan-orphan" for vm in live_vms(client)),
        WAIT,
        interval=0.3,
        what="the orphan VM collected",
    )

    ops.patch(control, kinds.MACHINE_DEPLOYMENT.resource, "scan", {"spec": {"replicas": 1}}, NS)
    wait_until(lambda: len(live_vms(client)) == 1, WAIT, interval=0.3, what="scaled down to 1 VM")
    ops.delete(control, kinds.MACHINE_DEPLOYMENT.resource, "scan", NS)
    wait_until(
        lambda: not ops.list_(control, kinds.MACHINE.resource, NS)["items"] and not live_vms(client),
        WAIT,
        interval=0.3,
        what="every machine and VM gone",
    )

    needles = [USER_DATA_MARKER, CREDENTIAL, EDITED, data["userData"], data["providerSecretAccessKey"]]
    scanned, found = search(client, needles)
    assert scanned > 50, f"only {scanned} keys: the scan did not see the keyspace"
    assert not found, "secret data in Redis:\n" + "\n".join(f"{f.type} {f.key}: {f.excerpt!r}" for f in found)
    # the mirror still knows the secret: metadata and a digest
    mirrored = client.hget("mcm:cache:secrets", f"{NS}/scan-secret")
    assert mirrored is not None and b"cache-data-digest" in mirrored
