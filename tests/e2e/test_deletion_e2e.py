"""Deleting machines end to end in the sandbox (``mcm_sandbox.runner.up``): real worker processes,
the informer and the kubelet simulator (pods Running and Ready, graceful deletion, CSI volumes attached
and detached), compressed timeouts. A Machine whose Node runs pods is drained under
PodDisruptionBudgets that hold, are misconfigured or never allow; pods with volumes leave one at a
time; the drain is forced by its timeout or the ``force-deletion`` label; the VM may already be gone;
a Node deleted by hand takes its Machine with it and the MachineSet replaces it. Every test ends with
the Machine, its Node and its VM gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION, Machine
from mcm_tasks.kube import ops
from providers.local import LocalCloud
from tests.e2e.support import connected, running_sandbox
from tests.e2e.worlds import ENV, NS, Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

WAIT = 90.0
SHORT_DRAIN = {"drainTimeout": "5s"}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(Path(tmp_path_factory.mktemp("deletion-e2e")), ENV, with_beat=False) as started:
        yield started


@pytest.fixture(scope="module")
def cluster(sandbox: Sandbox) -> Iterator[Cluster]:
    with connected(sandbox) as clients:
        c = Cluster(sandbox, clients)
        c.machine_class("drain")
        yield c


def holding_budget(c: Cluster, name: str, app: str) -> None:
    """A budget that allows no disruption yet is not misconfigured: 2 pods expected, 1 healthy (the
    peer is bound to a node no kubelet runs), 1 must stay."""
    c.run_pod(f"{app}-peer", "elsewhere", labels={"app": app})
    c.budget(name, {"app": app}, minAvailable=1)
    c.wait(lambda: c.budget_status(name).get("currentHealthy") == 1, f"budget {name} status")
    assert c.budget_status(name).get("disruptionsAllowed") == 0


def test_a_pdb_without_disruptions_holds_eviction_until_it_allows(cluster: Cluster) -> None:
    c = cluster
    name = c.launch("hold")
    c.run_pod("held", name, labels={"app": "hold"})
    c.run_pod("plain", name)
    c.wait(lambda: c.ready("held", "plain"), "pods Ready")
    holding_budget(c, "hold", "hold")
    c.delete(name)
    c.wait(lambda: c.pod("plain") is None and c.evict_attempts(name, "held") >= 3, "eviction refused 3 times")
    assert c.pod("held") is not None and not c.leaving("held")
    machine = c.get(name)
    assert machine is not None
    assert machine.status.current_status.phase == "Terminating"
    assert machine.status.last_operation.description == "Initiate node drain"
    node = c.node(name)
    assert node is not None and node["spec"].get("unschedulable") is True

    ops.patch(c.target, kinds.POD_DISRUPTION_BUDGET.resource, "hold", {"spec": {"minAvailable": 0}}, NS)
    c.wait_gone(name)
    assert c.pod("held") is None
    assert f"Drain of node {name} successful" in c.messages(name, "DrainSucceeded")
    assert not c.messages(name, "DrainFailed")


def test_a_misconfigured_pdb_fails_that_pod_and_the_drain_is_forced_after_the_timeout(
    cluster: Cluster,
) -> None:
    c = cluster
    name = c.launch("miscfg", spec=SHORT_DRAIN)
    c.run_pod("stuck", name, labels={"app": "stuck"})
    c.run_pod("free", name)
    c.wait(lambda: c.ready("stuck", "free"), "pods Ready")
    c.budget("zero", {"app": "stuck"}, maxUnavailable=0)
    c.wait(lambda: c.budget_status("zero").get("currentHealthy") == 1, "budget status")
    c.delete(name)
    c.wait(lambda: bool(c.messages(name, "DrainFailed")), "the drain reports the misconfigured budget")
    failed = c.messages(name, "DrainFailed")[0]
    assert f"pod disruption budget {NS}/zero is misconfigured" in failed and '"stuck"' in failed
    assert c.leaving("free")  # the other pod was drained all the same
    c.wait_gone(name)
    assert c.pod("stuck") is None
    assert any("drain timeout of 5s exceeded" in m for m in c.messages(name, "DrainStarted"))
    assert f"Force drain of node {name} successful" in c.messages(name, "DrainSucceeded")


def test_after_the_drain_timeout_a_holding_pdb_is_overridden(cluster: Cluster) -> None:
    c = cluster
    name = c.launch("timeout", spec=SHORT_DRAIN)
    c.run_pod("guarded", name, labels={"app": "guarded"})
    c.wait(lambda: c.ready("guarded"), "pod Ready")
    holding_budget(c, "guard", "guarded")
    c.delete(name)
    c.wait_gone(name)
    assert c.pod("guarded") is None
    started = c.messages(name, "DrainStarted")
    assert any(m.startswith(f"Draining node {name} (timeout 5s") for m in started)  # held at first
    assert any("drain timeout of 5s exceeded" in m for m in started)  # then forced
    assert f"Force drain of node {name} successful" in c.messages(name, "DrainSucceeded")


class PodWatch(threading.Thread):
    """Records, for each pod, the node's attached volumes when the pod was first seen leaving."""

    def __init__(self, c: Cluster, node: str, pods: list[str]) -> None:
        super().__init__(daemon=True)
        self.c, self.node, self.pods = c, node, pods
        self.stop = threading.Event()
        self.seen: dict[str, tuple[int, list[str]]] = {}

    def run(self) -> None:
        sample = 0
        while not self.stop.is_set() and len(self.seen) < len(self.pods):
            sample += 1
            attached = self.c.attached(self.node)
            for pod in self.pods:
                if pod not in self.seen and self.c.leaving(pod):
                    self.seen[pod] = (sample, attached)
            self.stop.wait(0.05)


def test_pods_with_volumes_are_evicted_one_by_one_and_wait_for_detach(cluster: Cluster) -> None:
    c = cluster
    name = c.launch("vols")
    c.volume(f"{name}-high")
    c.volume(f"{name}-low")
    c.run_pod("vol-high", name, claim=f"{name}-high", priority=1000)
    c.run_pod("vol-low", name, claim=f"{name}-low")
    c.run_pod("vol-none", name)
    c.wait(lambda: c.ready("vol-high", "vol-low", "vol-none"), "pods Ready with their volumes attached")
    assert len(c.attached(name)) == 2
    watch = PodWatch(c, name, ["vol-high", "vol-low"])
    watch.start()
    try:
        c.delete(name)
        c.wait_gone(name)
    finally:
        watch.stop.set()
        watch.join(10)
    high_sample, _ = watch.seen["vol-high"]
    low_sample, attached_then = watch.seen["vol-low"]
    assert high_sample < low_sample  # the highest priority first, the next one only later
    assert not any(f"vol-{name}-high" in v for v in attached_then)  # after the first volume detached
    assert c.pod("vol-none") is None
    assert f"Drain of node {name} successful" in c.messages(name, "DrainSucceeded")


def test_the_force_deletion_label_deletes_pods_at_once(cluster: Cluster) -> None:
    c = cluster
    name = c.launch("force", labels={"force-deletion": "True"})
    c.run_pod("forced", name, labels={"app": "forced"})
    c.wait(lambda: c.ready("forced"), "pod Ready")
    c.budget("never", {"app": "forced"}, maxUnavailable=0)
    c.wait(lambda: c.budget_status("never").get("currentHealthy") == 1, "budget status")
    c.delete(name)
    c.wait_gone(name, timeout=60)  # far less than the 180 s drain timeout
    assert c.pod("forced") is None
    assert not c.messages(name, "DrainFailed")
    assert any('label "force-deletion" is set' in m for m in c.messages(name, "DrainStarted"))


def test_the_vm_already_gone_at_deletion(cluster: Cluster) -> None:
    c = cluster
    name = c.launch("novm")
    c.run_pod("orphaned", name)
    c.wait(lambda: c.ready("orphaned"), "pod Ready")
    [vm] = c.live_vms(name)
    LocalCloud(c.redis).terminate(vm.id)
    c.wait(lambda: not c.live_vms(name), "VM terminated")
    c.delete(name)
    c.wait_gone(name)
    assert c.pod("orphaned") is None


def test_a_node_deleted_by_hand_deletes_its_machine_and_the_set_replaces_it(cluster: Cluster) -> None:
    c = cluster
    labels = {"set": "handdel"}
    body = {
        "apiVersion": API_VERSION,
        "kind": "MachineSet",
        "metadata": {"name": "handdel", "namespace": NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"class": {"kind": "MachineClass", "name": "drain"}},
            },
        },
    }
    ops.create(c.control, kinds.MACHINE_SET.resource, body)

    def members() -> list[Machine]:
        items = ops.list_(c.control, kinds.MACHINE.resource, NS, label_selector="set=handdel")["items"]
        return [Machine.model_validate(m) for m in items]

    def running() -> list[str]:
        return [
            str(m.metadata.name)
            for m in members()
            if m.status.current_status.phase == "Running" and not m.metadata.is_deleting
        ]

    c.wait(lambda: len(running()) == 1 and c.node(running()[0]) is not None, "the set's machine Running")
    [first] = running()
    ops.delete(c.target, kinds.NODE.resource, first)
    c.wait_gone(first)
    c.wait(lambda: len(running()) == 1 and len(members()) == 1, "a replacement Running")
    [second] = running()
    assert second != first
    assert c.node(second) is not None and len(c.live_vms(second)) == 1
    ops.delete(c.control, kinds.MACHINE_SET.resource, "handdel", NS)
    c.wait_gone(second)


def test_admin_why_names_the_pod_and_the_budget_that_hold_a_drain(cluster: Cluster, sandbox: Sandbox) -> None:
    """``mcm-tasks admin why machine/NS/NAME`` (the console script, as an operator runs it) says which
    pod's eviction is refused and by which PodDisruptionBudget, while the drain waits."""
    c = cluster
    name = c.launch("why")
    c.run_pod("why-held", name, labels={"app": "why"})
    c.wait(lambda: c.ready("why-held"), "pod Ready")
    holding_budget(c, "why-hold", "why")
    c.delete(name)
    c.wait(lambda: c.evict_attempts(name, "why-held") >= 2, "eviction refused twice")

    def deleting() -> dict[str, Any]:
        found = ops.get(c.control, kinds.MACHINE.resource, name, NS) or {}
        return next((x for x in found["status"].get("conditions") or [] if x["type"] == "Deleting"), {})

    c.wait(lambda: "PodDisruptionBudget default/why-hold" in deleting().get("message", ""),
           "the Deleting condition to name the pod and its budget")  # fmt: skip
    assert deleting()["reason"] == "DrainingNode"
    assert (
        f"pod {NS}/why-held: eviction refused by PodDisruptionBudget {NS}/why-hold" in deleting()["message"]
    )
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MCM_")}, **sandbox.env()}
    command = [str(Path(sys.executable).with_name("mcm-tasks")), "admin", "why", f"machine/{NS}/{name}"]
    done = subprocess.run([*command, "--output", "json"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    waits = json.loads(done.stdout)["waits"]
    (drain,) = [w for w in waits if w.startswith("draining node")]
    assert f"pod {NS}/why-held: eviction refused" in drain, drain
    assert f"by PodDisruptionBudget {NS}/why-hold (0 disruptions allowed)" in drain, drain
    assert any(w.startswith("Deleting: DrainingNode: ") and "why-hold" in w for w in waits), waits
    table = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert "PodDisruptionBudget default/why-hold" in table.stdout, table.stdout

    ops.patch(c.target, kinds.POD_DISRUPTION_BUDGET.resource, "why-hold", {"spec": {"minAvailable": 0}}, NS)
    c.wait_gone(name)
