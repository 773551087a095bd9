"""Issue 31 end to end in the sandbox (real workers, informer, kubelet simulator, compressed time):
lifecycle hooks hold a deleting machine before its drain and before its VM goes; drain rules order,
skip and wait for pods; the deletion order of a set; a machine the autoscaler marked is replaced at
unchanged replicas; per-deployment timeouts bound the volume detach and the Node deletion."""

from __future__ import annotations

import json
import threading
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
    POD_DRAIN_LABEL_KEY,
    PRE_DRAIN_HOOK_PREFIX,
    PRE_TERMINATE_HOOK_PREFIX,
)
from mcm_tasks.kube import ops
from mcm_tasks.kube.resources import Resource
from tests.e2e.support import connected, machine_set, running_sandbox
from tests.e2e.worlds import ENV, NS, Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

JOBS = Resource("batch", "v1", "jobs", "Job")


#: the deletion e2e's compressed time, and beat running the overshooting check (which judges the
#: drain rules) every second
LIFECYCLE_ENV = {**ENV, "MCM_MACHINE_SAFETY_OVERSHOOTING_PERIOD": "1s", "MCM_SAFETY_EVENT_MIN_INTERVAL": "1s"}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    directory = Path(tmp_path_factory.mktemp("lifecycle-e2e"))
    with running_sandbox(directory, LIFECYCLE_ENV, with_beat=True) as started:
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
    assert c.messages(name, "PreDrainHooksReleased") == ["No pre-drain hook is left: draining the node"]


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


# --- drain rules ---------------------------------------------------------------------------------


def drain_rule(c: Cluster, name: str, drain: dict[str, Any], pods: list[dict[str, Any]] | None = None,
               machines: list[dict[str, Any]] | None = None) -> None:  # fmt: skip
    body = {
        "apiVersion": kinds.MACHINE_DRAIN_RULE.resource.api_version,
        "kind": "MachineDrainRule",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"drain": drain, "pods": pods or [], "machines": machines or []},
    }
    ops.create(c.control, kinds.MACHINE_DRAIN_RULE.resource, body)


def rule_valid(c: Cluster, name: str) -> tuple[str, str]:
    """(status, message) of the rule's ``Valid`` condition, or empty."""
    rule = ops.get(c.control, kinds.MACHINE_DRAIN_RULE.resource, name, NS) or {}
    found = [x for x in (rule.get("status") or {}).get("conditions") or [] if x.get("type") == "Valid"]
    return (str(found[0]["status"]), str(found[0].get("message"))) if found else ("", "")


def wait_valid(c: Cluster, name: str, status: str = "True") -> str:
    c.wait(lambda: rule_valid(c, name)[0] == status, f"rule {name} Valid={status}")
    return rule_valid(c, name)[1]


def delete_rule(c: Cluster, name: str) -> None:
    ops.delete(c.control, kinds.MACHINE_DRAIN_RULE.resource, name, NS, missing_ok=True)


def namespace(c: Cluster, name: str, labels: dict[str, str]) -> None:
    ops.create(c.target, kinds.NAMESPACE.resource, {"metadata": {"name": name, "labels": labels}})


def run_in(c: Cluster, namespace_: str, name: str, node: str, labels: dict[str, str] | None = None) -> None:
    body = {
        "metadata": {"name": name, "namespace": namespace_, "labels": labels or {}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "busybox"}]},
    }  # fmt: skip
    ops.create(c.target, kinds.POD.resource, body)


def pod_in(c: Cluster, namespace_: str, name: str) -> dict[str, Any] | None:
    return ops.get(c.target, kinds.POD.resource, name, namespace_, missing_ok=True)


def ready_in(c: Cluster, namespace_: str, name: str) -> bool:
    conditions = ((pod_in(c, namespace_, name) or {}).get("status") or {}).get("conditions") or []
    return any(x.get("type") == "Ready" and x.get("status") == "True" for x in conditions)


class Lifetimes(threading.Thread):
    """For each pod, the sample at which it was first seen leaving and first seen gone (``pods`` in
    the order they must go)."""

    def __init__(self, c: Cluster, pods: list[tuple[str, str]]) -> None:
        super().__init__(daemon=True)
        self.c, self.pods = c, pods
        self.stop = threading.Event()
        self.leaving: dict[tuple[str, str], int] = {}
        self.gone: dict[tuple[str, str], int] = {}

    def run(self) -> None:
        sample = 0
        while not self.stop.is_set() and len(self.gone) < len(self.pods):
            sample += 1
            # the later pods first: one seen leaving in a sample was leaving before the earlier pods
            # were looked at, so an earlier pod that had to be gone first is seen gone in that sample
            for key in reversed(self.pods):
                found = pod_in(self.c, *key)
                if found is None or found["metadata"].get("deletionTimestamp"):
                    self.leaving.setdefault(key, sample)
                if found is None:
                    self.gone.setdefault(key, sample)
            self.stop.wait(0.05)


def test_a_drain_rule_with_order_minus_100_empties_namespace_a_before_b(cluster: Cluster) -> None:
    c = cluster
    namespace(c, "team-a", {"team": "a"})
    namespace(c, "team-b", {"team": "b"})
    drain_rule(c, "team-a-first", {"behavior": "Drain", "order": -100},
               pods=[{"namespaceSelector": {"matchLabels": {"team": "a"}}}])  # fmt: skip
    assert wait_valid(c, "team-a-first") == "the rule is used by drains"
    name = c.launch("ordered-drain")
    pods = [("team-a", "a1"), ("team-a", "a2"), ("team-b", "b1"), ("team-b", "b2")]
    for ns, pod in pods:
        run_in(c, ns, pod, name)
    c.wait(lambda: all(ready_in(c, ns, pod) for ns, pod in pods), "pods Ready")
    watch = Lifetimes(c, pods)
    watch.start()
    try:
        c.delete(name)
        c.wait_gone(name)
    finally:
        watch.stop.set()
        watch.join(10)
    a_gone = max(watch.gone[("team-a", p)] for p in ("a1", "a2"))
    b_leaving = min(watch.leaving[("team-b", p)] for p in ("b1", "b2"))
    assert a_gone <= b_leaving, (watch.leaving, watch.gone)
    delete_rule(c, "team-a-first")


def test_wait_completed_pods_are_not_evicted_and_skip_pods_stay(cluster: Cluster) -> None:
    """A Job's pod under a WaitCompleted rule stays until it has succeeded, and the drain waits for
    it; a pod labelled ``mcm-tasks.io/drain: skip`` stays; a pre-terminate hook holds the flow after
    the drain so that what the drain left can be looked at."""
    c = cluster
    drain_rule(
        c, "batch-jobs", {"behavior": "WaitCompleted"}, pods=[{"selector": {"matchLabels": {"app": "batch"}}}]
    )
    wait_valid(c, "batch-jobs")
    hook = f"{PRE_TERMINATE_HOOK_PREFIX}e2e"
    name = c.launch("waitjob")
    annotate(c, name, {hook: ""})  # holds the flow after the drain, to look at what it left
    job = {"metadata": {"name": "batch-job", "namespace": NS},
           "spec": {"template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "busybox"}]}}}}  # fmt: skip
    uid = ops.create(c.target, JOBS, job)["metadata"]["uid"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "batch-job", "uid": uid, "controller": True}
    c.run_pod("job", name, labels={"app": "batch", "job-name": "batch-job"})
    ops.patch(c.target, kinds.POD.resource, "job", {"metadata": {"ownerReferences": [owner]}}, NS)
    c.run_pod("cache", name, labels={POD_DRAIN_LABEL_KEY: "skip"})
    c.run_pod("web", name)
    c.wait(lambda: c.ready("job", "cache", "web"), "pods Ready")
    c.delete(name)
    c.wait(lambda: c.pod("web") is None, "the plain pod drained")
    c.wait(lambda: bool(c.messages(name, "DrainStarted")), "the drain under way")
    # the drain waits for the job: never evicted, the flow stays at the drain
    assert deleting(c, name)[0] == "DrainingNode"
    assert not c.leaving("job") and not c.leaving("cache")
    ops.patch(
        c.target, kinds.POD.resource, "job", {"status": {"phase": "Succeeded"}}, NS, subresource="status"
    )
    c.wait(
        lambda: deleting(c, name)[0] == "WaitingForPreTerminateHook", "the drain over once the job completed"
    )
    assert c.pod("job") is not None and not c.leaving("job")  # completed, never evicted
    assert c.pod("cache") is not None and not c.leaving("cache")  # skipped: left on the node
    assert f"Drain of node {name} successful" in c.messages(name, "DrainSucceeded")
    annotate(c, name, {hook: None})
    c.wait_gone(name)
    delete_rule(c, "batch-jobs")
    for pod in ("job", "cache"):
        ops.delete(c.target, kinds.POD.resource, pod, NS, missing_ok=True)
    ops.delete(c.target, JOBS, "batch-job", NS, missing_ok=True)


def test_hostile_drain_rules_get_their_condition_and_harm_nothing(cluster: Cluster) -> None:
    c = cluster
    hostile = {
        "bad-selector": (
            {"behavior": "Skip"},
            [{"selector": {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}}],
        ),
        "huge-order": ({"behavior": "Drain", "order": 10**15}, []),
        "unknown-behavior": ({"behavior": "Evaporate"}, []),
    }  # fmt: skip
    for rule_name, (drain, pods) in hostile.items():
        drain_rule(c, rule_name, drain, pods=pods)
    said = {rule_name: wait_valid(c, rule_name, "False") for rule_name in hostile}
    assert "'Near' is not a valid selector operator" in said["bad-selector"]
    assert "1000000000000000 is outside the int32 range" in said["huge-order"]
    assert "'Evaporate' is not one of Drain, Skip, WaitCompleted" in said["unknown-behavior"]
    for rule_name in hostile:
        c.wait(lambda n=rule_name: bool(c.messages(n, "InvalidDrainRule")), f"{rule_name}'s Event")
    # ignored: a machine drains as MCM drains it (the Skip rule with a bad selector skips nothing)
    name = c.launch("beside-hostile")
    c.run_pod("plain-app", name, labels={"app": "x"})
    c.wait(lambda: c.ready("plain-app"), "pod Ready")
    c.delete(name)
    c.wait_gone(name)
    assert c.pod("plain-app") is None
    for rule_name in hostile:
        delete_rule(c, rule_name)
