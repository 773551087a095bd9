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
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION, Machine
from mcm_tasks.controllers.machine.drain.state_io import PodProgress, drain_key
from mcm_tasks.kube import ops
from providers.local import CSI_DRIVER, LocalCloud
from tests.e2e.support import connected, running_sandbox
from tests.e2e.test_machine_e2e import World

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

NS = "default"
WAIT = 90.0
#: compressed time; every process serves all reconcilers. The global drain timeout is long so that a
#: holding budget holds; tests that want the drain forced give their machine ``drainTimeout`` "5s".
ENV = {
    "MCM_LONG_RETRY": "5s",
    "MCM_MACHINE_DRAIN_TIMEOUT": "180s",
    "MCM_FORCE_DRAIN_TIMEOUT": "5s",
    "MCM_POD_EVICTION_RETRY_INTERVAL": "0.5s",
    "MCM_MACHINE_PV_DETACH_TIMEOUT": "20s",
    "MCM_MACHINE_PV_REATTACH_TIMEOUT": "0.5s",
}
SHORT_DRAIN = {"drainTimeout": "5s"}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(Path(tmp_path_factory.mktemp("deletion-e2e")), ENV, with_beat=False) as started:
        yield started


class Cluster(World):
    """The machine e2e's world plus what a drain needs: pods, budgets and volumes on the target."""

    def launch(
        self, prefix: str, *, labels: dict[str, str] | None = None, spec: dict[str, Any] | None = None
    ) -> str:
        """A standalone Machine of class ``drain``, Running with its Node registered."""
        name = f"{prefix}-{uuid.uuid4().hex[:5]}"
        body = {
            "apiVersion": API_VERSION,
            "kind": "Machine",
            "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
            "spec": {"class": {"kind": "MachineClass", "name": "drain"}, **(spec or {})},
        }
        ops.create(self.control, kinds.MACHINE.resource, body)
        self.wait_phase(name, "Running")
        self.wait(lambda: self.node(name) is not None, f"node {name}")
        return name

    def run_pod(
        self, name: str, node: str, *, labels: dict[str, str] | None = None, claim: str = "", **spec: Any
    ) -> None:
        body: dict[str, Any] = {
            "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "busybox"}],
                **spec,
            },
        }
        if claim:
            body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        ops.create(self.target, kinds.POD.resource, body)

    def pod(self, name: str) -> dict[str, Any] | None:
        return ops.get(self.target, kinds.POD.resource, name, NS, missing_ok=True)

    def ready(self, *names: str) -> bool:
        def one(pod: dict[str, Any] | None) -> bool:
            conditions = ((pod or {}).get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

        return all(one(self.pod(n)) for n in names)

    def leaving(self, name: str) -> bool:
        found = self.pod(name)
        return found is None or bool(found["metadata"].get("deletionTimestamp"))

    def budget(self, name: str, selector: dict[str, str], **spec: Any) -> None:
        body = {
            "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"matchLabels": selector}, **spec},
        }
        ops.create(self.target, kinds.POD_DISRUPTION_BUDGET.resource, body)

    def budget_status(self, name: str) -> dict[str, Any]:
        return dict(
            (ops.get(self.target, kinds.POD_DISRUPTION_BUDGET.resource, name, NS) or {}).get("status") or {}
        )

    def volume(self, name: str) -> None:
        """A PersistentVolume of the local CSI driver bound to a claim of the same name."""
        pv = {
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": CSI_DRIVER, "volumeHandle": f"vol-{name}"},
                "claimRef": {"namespace": NS, "name": name},
            },
        }
        ops.create(self.target, kinds.PERSISTENT_VOLUME.resource, pv)
        claim = {
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeName": name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        ops.create(self.target, kinds.PERSISTENT_VOLUME_CLAIM.resource, claim)

    def attached(self, node: str) -> list[str]:
        found = ((self.node(node) or {}).get("status") or {}).get("volumesAttached") or []
        return [str(v["name"]) for v in found]

    def messages(self, name: str, reason: str) -> list[str]:
        items = ops.list_(self.control, kinds.EVENT.resource, NS)["items"]
        return [
            str(e.get("message"))
            for e in items
            if (e.get("involvedObject") or {}).get("name") == name and e.get("reason") == reason
        ]

    def delete(self, name: str) -> None:
        ops.delete(self.control, kinds.MACHINE.resource, name, NS)

    def gone(self, name: str) -> bool:
        """Machine and Node deleted, and no VM of it left in the local cloud, not even a terminating one."""
        return (
            self.get(name) is None and self.node(name) is None and not LocalCloud(self.redis).by_machine(name)
        )

    def wait_gone(self, name: str, timeout: float = WAIT) -> None:
        self.wait(lambda: self.gone(name), f"machine, node and VM of {name} gone", timeout)
        assert not self.redis.exists(drain_key(f"{NS}/{name}"))

    def evict_attempts(self, machine: str, pod: str) -> int:
        raw = self.redis.hget(drain_key(f"{NS}/{machine}"), f"pod:{NS}/{pod}")
        return PodProgress.model_validate_json(raw).attempts if raw else 0


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
