"""The per-deployment deletion timeouts against the sandbox API server, the kubelet simulator and
the termination reconciler (issue 31): ``mcm-tasks.io/node-volume-detach-timeout`` on a machine's
MachineSet bounds the "Delete Volume Attachments" step of a forced deletion, which upstream retries
forever; an invalid value is told on the machine and changes nothing."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from mcm_sandbox.procs import ApiServer, wait_until
from mcm_tasks.api.constants import NODE_VOLUME_DETACH_TIMEOUT_ANNOTATION
from tests.integration.deletion.support import CLASS, GROUP, VERSION, Env, drive, index, unique

pytestmark = pytest.mark.integration


def owned_by_set(env: Env, machine: str, annotations: dict[str, str]) -> None:
    """A MachineSet (no set controller runs here) carrying ``annotations``, owning ``machine``."""
    labels = {"set": machine}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "MachineSet",
        "metadata": {"name": f"{machine}-set", "namespace": "default", "annotations": annotations},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"class": {"kind": "MachineClass", "name": CLASS}}}},
    }  # fmt: skip
    created = env.custom.create_namespaced_custom_object(GROUP, VERSION, "default", "machinesets", body)
    owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MachineSet", "name": f"{machine}-set",
             "uid": created["metadata"]["uid"], "controller": True}  # fmt: skip
    patch = {"metadata": {"ownerReferences": [owner], "labels": labels}}
    env.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "machines", machine, patch)


@pytest.fixture()
def va_deletes_fail(server: ApiServer) -> Iterator[None]:
    """Every DELETE of a VolumeAttachment answers 500 (an attacher that never lets go)."""
    rule = {"action": "error", "status_code": 500, "verbs": ["delete"], "resources": ["volumeattachments"]}
    request = urllib.request.Request(f"{server.url}/sandbox/faults", data=json.dumps(rule).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")  # fmt: skip
    with urllib.request.urlopen(request, timeout=5) as resp:
        rule_id = json.loads(resp.read())["id"]
    try:
        yield
    finally:
        done = urllib.request.Request(f"{server.url}/sandbox/faults/{rule_id}", method="DELETE")
        urllib.request.urlopen(done, timeout=5).close()


def forced_with_a_volume(env: Env, prefix: str, annotations: dict[str, str]) -> str:
    name = unique(prefix)
    env.launch(name, labels={"force-deletion": "1"})
    owned_by_set(env, name, annotations)
    env.volume(f"{name}-v", f"vol-v-{name}")
    env.run_pod("disk", name, claim=f"{name}-v")
    wait_until(lambda: env.running("disk"), 15, what="pod running")
    wait_until(lambda: bool(env.storage.list_volume_attachment().items), 10, what="volume attached")
    return name


def reasons(env: Env, name: str) -> dict[str, str]:
    return dict(env.events(name))


def test_the_sets_volume_detach_timeout_ends_the_wait_for_volume_attachments(
    env: Env, va_deletes_fail: Any
) -> None:
    name = forced_with_a_volume(env, "vadetach", {NODE_VOLUME_DETACH_TIMEOUT_ANNOTATION: "1s"})
    env.delete_machine(name)
    trace = drive(env, name, timeout=30)
    text = next(d for d in trace.descriptions if "still live after 1s" in d)
    assert text.startswith(f"VolumeAttachments of node {name} still live after 1s: ")
    assert text.endswith("Moving to VM Deletion. Initiate VM deletion")
    assert index(trace, "Force Drain successful. Delete Volume Attachments") < index(
        trace, "still live after 1s"
    )
    assert "mcm-tasks.io/node-volume-detach-timeout" in reasons(env, name)["VolumeDetachTimeout"]


def test_an_invalid_timeout_is_told_on_the_machine_and_ignored(env: Env, va_deletes_fail: Any) -> None:
    name = forced_with_a_volume(env, "vabad", {NODE_VOLUME_DETACH_TIMEOUT_ANNOTATION: "soon"})
    env.delete_machine(name)
    trace = drive(env, name, until=lambda t: "InvalidTimeout" in reasons(env, name), timeout=20)
    assert "Delete Volume Attachments" in trace.descriptions[-1]  # still retrying, as upstream
    said = reasons(env, name)["InvalidTimeout"]
    assert said == "mcm-tasks.io/node-volume-detach-timeout: 'soon' is not a duration (e.g. 10s, 5m); ignored"
