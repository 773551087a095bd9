"""Issue 31 end to end in the sandbox (real workers, informer, kubelet simulator, compressed time):
lifecycle hooks hold a deleting machine before its drain and before its VM goes; drain rules order,
skip and wait for pods; the deletion order of a set; a machine the autoscaler marked is replaced at
unchanged replicas; per-deployment timeouts bound the volume detach and the Node deletion."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import Machine
from mcm_tasks.api.constants import (
    MACHINE_DELETING_CONDITION,
    PRE_DRAIN_HOOK_PREFIX,
    PRE_TERMINATE_HOOK_PREFIX,
)
from mcm_tasks.kube import ops
from tests.e2e.support import connected, running_sandbox
from tests.e2e.test_deletion_e2e import ENV, NS, Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(Path(tmp_path_factory.mktemp("lifecycle-e2e")), ENV, with_beat=False) as started:
        yield started


@pytest.fixture(scope="module")
def cluster(sandbox: Sandbox) -> Iterator[Cluster]:
    with connected(sandbox) as clients:
        c = Cluster(sandbox, clients)
        c.machine_class("drain")
        yield c


def deleting(c: Cluster, name: str) -> tuple[str, str, datetime | None]:
    """The machine's ``Deleting`` condition: (reason, message, lastTransitionTime), or empty."""
    machine = c.get(name)
    found = next(
        (x for x in (machine.status.conditions if machine else []) if x.type == MACHINE_DELETING_CONDITION),
        None,
    )
    return (found.reason, found.message, found.last_transition_time) if found else ("", "", None)


def annotate(c: Cluster, name: str, annotations: dict[str, str | None]) -> None:
    ops.patch(c.control, kinds.MACHINE.resource, name, {"metadata": {"annotations": annotations}}, NS)


def test_a_pre_drain_hook_keeps_the_node_uncordoned_until_it_is_removed(cluster: Cluster) -> None:
    c = cluster
    hook = f"{PRE_DRAIN_HOOK_PREFIX}backup-operator"
    name = c.launch("predrain", spec={"drainTimeout": "3s"})
    annotate(c, name, {hook: "taking a last backup"})
    c.run_pod("predrain-app", name)
    c.wait(lambda: c.ready("predrain-app"), "pod Ready")
    c.delete(name)
    c.wait(lambda: deleting(c, name)[0] == "WaitingForPreDrainHook", "the machine waits for its hook")
    machine = c.get(name)
    assert isinstance(machine, Machine)
    description = machine.status.last_operation.description
    assert description == "Waiting for pre-drain hooks to be removed: backup-operator. Initiate node drain"
    assert machine.status.last_operation.state == "Processing"
    assert c.messages(name, "WaitingForPreDrainHook") == [
        "Waiting for pre-drain hooks to be removed: backup-operator"
    ]
    # held longer than its drain timeout: the hold must not count against it
    since = deleting(c, name)[2]
    assert since is not None
    c.wait(lambda: (datetime.now(UTC) - since).total_seconds() > 4, "held past the drain timeout", 20)
    node = c.node(name)
    assert node is not None and not node["spec"].get("unschedulable")
    assert c.pod("predrain-app") is not None and not c.leaving("predrain-app")

    annotate(c, name, {hook: None})
    c.wait_gone(name)
    started = c.messages(name, "DrainStarted")
    assert any(m.startswith(f"Draining node {name} (timeout 3s") for m in started), started
    assert not any("drain timeout" in m for m in started), started


def test_a_pre_terminate_hook_keeps_the_vm_after_the_drain(cluster: Cluster) -> None:
    c = cluster
    hook = f"{PRE_TERMINATE_HOOK_PREFIX}storage-detacher"
    name = c.launch("preterm")
    annotate(c, name, {hook: ""})
    c.run_pod("preterm-app", name)
    c.wait(lambda: c.ready("preterm-app"), "pod Ready")
    c.delete(name)
    c.wait(lambda: deleting(c, name)[0] == "WaitingForPreTerminateHook", "the machine waits for its hook")
    assert c.pod("preterm-app") is None  # drained
    node = c.node(name)
    assert node is not None and node["spec"].get("unschedulable") is True
    assert len(c.live_vms(name)) == 1  # the VM stays
    _, message, _ = deleting(c, name)
    assert message == "Waiting for pre-terminate hooks to be removed: storage-detacher. Initiate VM deletion"
    assert c.messages(name, "WaitingForPreTerminateHook")

    annotate(c, name, {hook: None})
    c.wait_gone(name)
