"""Issue 31 end to end in the sandbox (real workers, informer, kubelet simulator, compressed time):
lifecycle hooks hold a deleting machine before its drain and before its VM goes; drain rules order,
skip and wait for pods; the deletion order of a set; a machine the autoscaler marked is replaced at
unchanged replicas; per-deployment timeouts bound the volume detach and the Node deletion."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import Machine
from mcm_tasks.api.constants import (
    DELETION_ORDER_ANNOTATION,
    MACHINE_DELETING_CONDITION,
    MACHINE_PRIORITY_ANNOTATION,
    MARKED_FOR_DELETION_TIME_ANNOTATION,
    NODE_DELETION_TIMEOUT_ANNOTATION,
    NODE_VOLUME_DETACH_TIMEOUT_ANNOTATION,
    PRE_DRAIN_HOOK_PREFIX,
    PRE_TERMINATE_HOOK_PREFIX,
)
from mcm_tasks.kube import ops
from tests.e2e.support import connected, machine_set, running_sandbox
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


# --- deletion order and MCM #1078 ------------------------------------------------------------------


def set_members(c: Cluster, set_name: str) -> list[Machine]:
    items = ops.list_(c.control, kinds.MACHINE.resource, NS, label_selector=f"set={set_name}")["items"]
    return [Machine.model_validate(m) for m in items]


def running_members(c: Cluster, set_name: str) -> list[Machine]:
    return [
        m
        for m in set_members(c, set_name)
        if m.status.current_status.phase == "Running" and not m.metadata.is_deleting
    ]


def scale(c: Cluster, set_name: str, replicas: int) -> None:
    ops.patch(c.control, kinds.MACHINE_SET.resource, set_name, {"spec": {"replicas": replicas}}, NS)


def settle(c: Cluster, set_name: str, replicas: int) -> list[str]:
    """Wait until the set has exactly ``replicas`` machines, all Running; their names."""
    c.wait(
        lambda: len(running_members(c, set_name)) == replicas == len(set_members(c, set_name)),
        f"{set_name}: {replicas} machines Running and no other",
        120,
    )
    return sorted(str(m.metadata.name) for m in running_members(c, set_name))


def by_age(c: Cluster, set_name: str) -> list[str]:
    """The set's machines, oldest first (creation time, then name: the order's tie-break)."""
    members = sorted(set_members(c, set_name), key=lambda m: (m.metadata.creation_timestamp, m.metadata.name))
    return [str(m.metadata.name) for m in members]


def test_deletion_order_oldest_then_newest(cluster: Cluster) -> None:
    c = cluster
    body = machine_set("ordered", 3, "drain")
    body["metadata"]["annotations"] = {DELETION_ORDER_ANNOTATION: "Oldest"}
    ops.create(c.control, kinds.MACHINE_SET.resource, body)
    first = settle(c, "ordered", 3)
    # the next two are created at least a second later: creation times are whole seconds
    newest = max(m.metadata.creation_timestamp for m in set_members(c, "ordered"))
    c.wait(lambda: datetime.now(UTC) > newest + timedelta(seconds=1.1), "a new second", 5)
    scale(c, "ordered", 5)
    settle(c, "ordered", 5)
    ages = by_age(c, "ordered")
    assert set(ages[:3]) == set(first)

    scale(c, "ordered", 3)  # 5 -> 3 with Oldest: the two oldest go
    assert settle(c, "ordered", 3) == sorted(ages[2:])
    # Newest: the newest goes, where upstream's order would take the oldest left
    ops.patch(c.control, kinds.MACHINE_SET.resource, "ordered",
              {"metadata": {"annotations": {DELETION_ORDER_ANNOTATION: "Newest"}}}, NS)  # fmt: skip
    scale(c, "ordered", 2)
    left = settle(c, "ordered", 2)
    assert ages[2] in left and len(set(left) & set(ages[3:])) == 1  # one of the two newest went

    ops.patch(c.control, kinds.MACHINE_SET.resource, "ordered",
              {"metadata": {"annotations": {DELETION_ORDER_ANNOTATION: "Eldest"}}}, NS)  # fmt: skip
    scale(c, "ordered", 1)
    c.wait(lambda: bool(c.messages("ordered", "InvalidDeletionOrder")), "the bad value is reported")
    assert "'Eldest' is not one of Random, Newest, Oldest" in c.messages("ordered", "InvalidDeletionOrder")[0]
    assert settle(c, "ordered", 1) == sorted(set(left) - {ages[2]})  # upstream's order: the oldest goes
    ops.delete(c.control, kinds.MACHINE_SET.resource, "ordered", NS)
    c.wait(lambda: not set_members(c, "ordered"), "the set's machines gone", 120)


def test_a_machine_marked_with_priority_1_is_replaced_at_unchanged_replicas(cluster: Cluster) -> None:
    c = cluster
    ops.create(c.control, kinds.MACHINE_SET.resource, machine_set("marked", 2, "drain"))
    before = settle(c, "marked", 2)
    victim = before[0]
    marked = (datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    annotate(c, victim, {MACHINE_PRIORITY_ANNOTATION: "1", MARKED_FOR_DELETION_TIME_ANNOTATION: marked})
    c.wait_gone(victim, timeout=120)
    after = settle(c, "marked", 2)
    assert victim not in after and before[1] in after
    ms = ops.get(c.control, kinds.MACHINE_SET.resource, "marked", NS)
    assert ms is not None and ms["spec"]["replicas"] == 2
    ops.delete(c.control, kinds.MACHINE_SET.resource, "marked", NS)
    c.wait(lambda: not set_members(c, "marked"), "the set's machines gone", 120)


# --- per-deployment timeouts ---------------------------------------------------------------------


def target_faults(sandbox: Sandbox, rule: dict[str, Any] | None) -> None:
    """A fault rule on the sandbox's target API server, or none."""
    url = sandbox.target_url + "/sandbox/faults"
    data = None if rule is None else json.dumps(rule).encode()
    method = "DELETE" if rule is None else "POST"
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    urllib.request.urlopen(request, timeout=5).close()


def one_machine_set(c: Cluster, name: str, annotations: dict[str, str]) -> str:
    body = machine_set(name, 1, "drain")
    body["metadata"]["annotations"] = annotations
    ops.create(c.control, kinds.MACHINE_SET.resource, body)
    [machine] = settle(c, name, 1)
    c.wait(lambda: c.node(machine) is not None, f"node {machine}")
    return machine


def test_the_sets_volume_detach_timeout_bounds_the_drains_wait(cluster: Cluster, sandbox: Sandbox) -> None:
    c = cluster
    name = one_machine_set(c, "detach", {NODE_VOLUME_DETACH_TIMEOUT_ANNOTATION: "2s"})
    c.volume(f"{name}-data")
    c.run_pod("detach-app", name, claim=f"{name}-data")
    c.wait(lambda: c.ready("detach-app") and bool(c.attached(name)), "pod Ready with its volume attached")
    target_faults(sandbox, {"action": "error", "status_code": 500, "verbs": ["delete"],
                            "resources": ["volumeattachments"]})  # fmt: skip
    try:
        scale(c, "detach", 0)
        c.wait(lambda: c.get(name) is None and not c.live_vms(name), "machine and VM gone", 60)
    finally:
        target_faults(sandbox, None)
    warnings = c.messages(name, "DrainWarning")
    assert any("after 2s" in w for w in warnings), warnings
    assert not any("after 20s" in w for w in warnings), warnings  # the flag's 20 s did not apply
    ops.delete(c.control, kinds.MACHINE_SET.resource, "detach", NS)


def test_the_sets_node_deletion_timeout_gives_up_on_the_node(cluster: Cluster, sandbox: Sandbox) -> None:
    c = cluster
    name = one_machine_set(c, "nodedel", {NODE_DELETION_TIMEOUT_ANNOTATION: "2s"})
    target_faults(
        sandbox, {"action": "error", "status_code": 500, "verbs": ["delete"], "resources": ["nodes"]}
    )
    try:
        scale(c, "nodedel", 0)
        c.wait(lambda: c.get(name) is None and not c.live_vms(name), "machine and VM gone", 60)
        assert c.node(name) is not None  # given up on, left behind
    finally:
        target_faults(sandbox, None)
    [note] = c.messages(name, "NodeDeletionTimeout")
    assert "gave up after the node deletion timeout of 2s" in note and "the Node is left behind" in note
    ops.delete(c.target, kinds.NODE.resource, name, missing_ok=True)
    c.wait(lambda: c.node(name) is None, "the Node deleted by hand")
    ops.delete(c.control, kinds.MACHINE_SET.resource, "nodedel", NS)
