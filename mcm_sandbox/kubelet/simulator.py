"""The kubelet simulator: one process plays the kubelet of every VM, plus the bits of
node-lifecycle and attach/detach controllers MCM can observe, against the target cluster (one
simulator per target cluster; ``clusters.py`` runs several in one process, seed mode's shoots).

VMs come from a :mod:`~mcm_sandbox.kubelet.sources` source: the local cloud (Redis), EC2
instances at an endpoint such as moto (:mod:`~mcm_sandbox.kubelet.aws`), or both.
Each tick (``--interval``) it reads the VMs and lists Nodes, Pods (and, when volumes
are involved, PVCs, PVs and VolumeAttachments) once, decides everything with pure functions
(``kubelet_node``, ``kubelet_pods``), then performs at most ``--max-actions`` writes, most urgent
first, so that a tick's work is bounded and no node waits on another:

1. registers the Node of each running VM (boot delay elapsed, not ``neverJoin``) once per VM,
   with ``spec.providerID``, labels (instance type, region, zone, arch), capacity and
   allocatable (local: the nodeTemplate; EC2: the instance type), addresses, Ready=True and
   the pressure conditions False;
2. posts the node's conditions when an order changed them, and heartbeats (``lastHeartbeatTime``)
   every ``--heartbeat-interval``;
3. plays node-lifecycle: a Node of one of its clouds whose heartbeat is older than
   ``--node-grace`` (its VM is gone, terminating, or heartbeats were stopped) gets Ready,
   MemoryPressure, DiskPressure and PIDPressure = Unknown, reason ``NodeStatusUnknown``;
4. removes terminating pods on live nodes (``delete`` with ``gracePeriodSeconds=0``) once their
   ``deletionTimestamp`` has passed; run the target API server with ``--pod-grace-mode kubelet``
   so that this, not a timer, ends graceful deletion;
5. marks pods bound to live nodes Running and Ready (phase, conditions, containerStatuses), once
   all their CSI volumes are attached to that node;
6. attaches CSI volumes of the node's pods (``node.status.volumesAttached`` entry
   ``kubernetes.io/csi/<driver>^<handle>`` and an attached VolumeAttachment), one node at a time
   per volume, and detaches them ``--detach-delay`` seconds after no pod on the node uses them
   (or its VM is gone).

Orders, as Node annotations:

``sandbox.mcm-tasks.io/condition-<Type>: "True" | "False" | "Unknown"``
    sets that node condition (e.g. ``condition-Ready: "False"``,
    ``condition-ReadonlyFilesystem: "True"``) with reason ``SandboxOrder``; removing the
    annotation puts it back to its healthy status (Ready True, anything else False).
``sandbox.mcm-tasks.io/inplace-update: "fail" | "hang"``
    the simulated node agent (``kubelet.inplace``) reports the in-place update of a node MCM made
    ready for it as failed, or never finishes it; without the order it succeeds after a second.
``sandbox.mcm-tasks.io/inplace-agent: "labels-only"``
    the simulated node agent writes its result as upstream's agent does: the ``update-result``
    label (and ``update-failed-reason``) and no ``InPlaceUpdate`` condition, which MCM then writes
    from the label; without the order it writes the condition ``UpdateSuccessful``/``UpdateFailed``
    too.
``sandbox.mcm-tasks.io/heartbeat: "stop"``
    the kubelet stops posting node status; after ``--node-grace`` the node goes Unknown. Remove
    the annotation to resume. Pods and volumes on the node are still handled.

Differences from a real cluster, on purpose: no taints are added by node-lifecycle, pods on a node
whose VM is gone are left to MCM's drain (a real kubelet would be gone too), and a deleted Node is
not registered again by the same VM.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_sandbox.kubelet import node as kn
from mcm_sandbox.kubelet import pods as kp
from mcm_sandbox.kubelet.inplace import agent_result
from mcm_sandbox.kubelet.sources import VMSource, as_source
from mcm_sandbox.kubelet.volumes import VolumePlan, plan_volumes
from mcm_sandbox.kubelet.watch import WatchedLists
from mcm_tasks.kube import rest
from providers.local.cloud import LocalCloud

log = logging.getLogger("mcm_sandbox.kubelet.simulator")

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
VA_PATH = "/apis/storage.k8s.io/v1/volumeattachments"

# action priorities: lower runs first when a tick has more to do than its budget
URGENT, PODS, VOLUMES, ROUTINE = 0, 1, 2, 3


@dataclass(order=True)
class Action:
    priority: int
    what: str = field(compare=False)
    run: Callable[[], None] = field(compare=False)


@dataclass
class Snapshot:
    """Everything one tick reads, read once."""

    now: float
    vms: dict[str, kn.KubeletVM]
    nodes: dict[str, dict[str, Any]]
    pods: list[dict[str, Any]]
    pvcs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pvs: dict[str, dict[str, Any]] = field(default_factory=dict)
    vas: list[dict[str, Any]] = field(default_factory=list)

    def live(self, node_name: str) -> bool:
        """A node whose VM runs and joined: its kubelet handles pods and volumes."""
        vm = self.vms.get(node_name)
        return vm is not None and vm.joins(self.now) and node_name in self.nodes


class KubeletSimulator:
    def __init__(
        self,
        api: ApiClient,
        cloud: VMSource | LocalCloud,
        *,
        heartbeat_interval: float = 10.0,
        node_grace: float = 40.0,
        detach_delay: float = 1.0,
        max_actions: int = 200,
        watched: WatchedLists | None = None,
        inplace_delay: float = 1.0,
    ) -> None:
        self.api = api
        #: reads from watches when given (the CLI), else a list per tick (tests that tick by hand)
        self.watched = watched
        self.source = as_source(cloud)
        self.heartbeat_interval = heartbeat_interval
        self.node_grace = node_grace
        self.detach_delay = detach_delay
        self.max_actions = max_actions
        #: seconds the simulated node agent takes for an in-place update
        self.inplace_delay = inplace_delay
        #: (node, "name:<volumesAttached name>" | "va:<pv>") -> when it was first seen unused
        self._unused_since: dict[tuple[str, str], float] = {}
        #: node name -> (resourceVersion, status changed by an order, next heartbeat due at)
        self._node_facts: dict[str, tuple[str, bool, float]] = {}

    # --- reading ---
    def _list(self, path: str) -> list[dict[str, Any]]:
        if self.watched is not None:
            return self.watched.list(path)
        doc = rest.request(self.api, "GET", path) or {}
        return list(doc.get("items") or [])

    def snapshot(self) -> Snapshot:
        now = self.source.clock()
        vms: dict[str, kn.KubeletVM] = {}
        for vm in self.source.live_vms():  # oldest first: of two VMs with one name, the older keeps it
            vms.setdefault(vm.node_name, vm)
        nodes = {n["metadata"]["name"]: n for n in self._list("/api/v1/nodes")}
        pods = self._list("/api/v1/pods")
        snap = Snapshot(now, vms, nodes, pods)
        uses_volumes = any(kp.claim_names(p) for p in pods if kp.node_of(p) in nodes)
        if uses_volumes or any((n.get("status") or {}).get("volumesAttached") for n in nodes.values()):
            snap.pvcs = {kp.pod_key(c): c for c in self._list("/api/v1/persistentvolumeclaims")}
            snap.pvs = {p["metadata"]["name"]: p for p in self._list("/api/v1/persistentvolumes")}
        snap.vas = self._list(VA_PATH)
        return snap

    # --- one tick ---
    def tick(self) -> dict[str, int]:
        """Read, decide, write; returns how many actions of each kind ran (logs and tests)."""
        snap = self.snapshot()
        actions = self._node_actions(snap) + self._pod_actions(snap) + self._volume_actions(snap)
        actions.sort()
        done: dict[str, int] = {}
        for action in actions[: self.max_actions]:
            try:
                action.run()
                done[action.what] = done.get(action.what, 0) + 1
            except ApiException as err:
                if err.status not in (404, 409):
                    log.warning("kubelet %s failed: %s %s", action.what, err.status, err.reason)
        return done

    def run(self, stop: threading.Event, interval: float = 0.5) -> None:
        while not stop.is_set():
            started = time.monotonic()
            if self.watched is not None and not self.watched.synced():
                stop.wait(0.05)
                continue
            try:
                done = self.tick()
                if done:
                    log.info("tick: %s", ", ".join(f"{k}={v}" for k, v in sorted(done.items())))
            except Exception as err:  # the API server restarting must not end the simulator
                log.warning("kubelet tick failed: %s: %s", type(err).__name__, err)
            stop.wait(max(interval - (time.monotonic() - started), 0.01))

    # --- nodes ---
    def _node_actions(self, snap: Snapshot) -> list[Action]:
        out = []
        for name, vm in snap.vms.items():
            if vm.joins(snap.now) and name not in snap.nodes and vm.registered_at is None:
                out.append(Action(URGENT, "register", partial(self._register, vm, snap.now)))
            elif vm.joins(snap.now) and name in snap.nodes and vm.registered_at is None:
                self.source.mark_registered(vm.id, snap.now)  # adopted an existing Node
        self._forget_gone_nodes(snap.nodes)
        for name, node in snap.nodes.items():
            owner = snap.vms.get(name)
            stopped = kn.heartbeat_stopped(kn.annotations_of(node))
            if owner is not None and owner.joins(snap.now) and not stopped:
                changed, due_at = self._heartbeat_facts(name, node)
                if changed or snap.now >= due_at:
                    conditions = kn.heartbeat_conditions(node, snap.now)
                    out.append(
                        Action(
                            URGENT if changed else ROUTINE,
                            "node-status" if changed else "heartbeat",
                            partial(self._patch_node_status, name, {"conditions": conditions}),
                        )
                    )
                update = agent_result(node, snap.now, self.inplace_delay)
                if update is not None:
                    out.append(Action(URGENT, "inplace-update", partial(self._finish_update, name, *update)))
            elif self.source.owns(node):
                unknown = kn.lifecycle_unknown_conditions(node, snap.now, self.node_grace)
                if unknown is not None:
                    out.append(
                        Action(
                            URGENT,
                            "node-unknown",
                            partial(self._patch_node_status, name, {"conditions": unknown}),
                        )
                    )
        return out

    def _forget_gone_nodes(self, nodes: dict[str, Any]) -> None:
        if len(self._node_facts) > len(nodes) + 100:
            self._node_facts = {n: f for n, f in self._node_facts.items() if n in nodes}

    def _heartbeat_facts(self, name: str, node: dict[str, Any]) -> tuple[bool, float]:
        """(an order changed the status, when the next heartbeat is due) of a Node, as
        ``kn.heartbeat_due`` decides them, memoized per resourceVersion: a tick looks at every Node,
        and most have not changed since the last (at 10 000 Nodes, re-deciding them all was half of
        every tick). A Node without a resourceVersion (a hand-made list) is decided afresh."""
        version = str((node.get("metadata") or {}).get("resourceVersion") or "")
        known = self._node_facts.get(name)
        if version and known is not None and known[0] == version:
            return known[1], known[2]
        changed, due_at = kn.status_changed(node), kn.heartbeat_due_at(node, self.heartbeat_interval)
        if version:
            self._node_facts[name] = (version, changed, due_at)
        return changed, due_at

    def _register(self, vm: kn.KubeletVM, now: float) -> None:
        try:
            rest.request(self.api, "POST", "/api/v1/nodes", body=kn.node_manifest(vm, now))
        except ApiException as err:
            if err.status != 409:
                raise
        self.source.mark_registered(vm.id, now)

    def _finish_update(self, name: str, metadata: dict[str, Any], condition: dict[str, Any] | None) -> None:
        """The node agent's result: the label first, then (unless the agent writes labels only) the
        condition. Not the other way round: a Node whose condition says ``UpdateSuccessful`` while
        its ``update-result`` label is missing reads, to MCM's ``updateNodeConditionBasedOnLabel``,
        as one an earlier update left behind, and goes back to ``CandidateForUpdate``."""
        rest.request(
            self.api, "PATCH", f"/api/v1/nodes/{name}", body={"metadata": metadata}, content_type=STRATEGIC
        )
        if condition is not None:
            self._patch_node_status(name, {"conditions": [condition]})

    def _patch_node_status(self, name: str, status: dict[str, Any]) -> None:
        rest.request(
            self.api, "PATCH", f"/api/v1/nodes/{name}/status", body={"status": status}, content_type=STRATEGIC
        )

    # --- pods ---
    def _pod_actions(self, snap: Snapshot) -> list[Action]:
        out = []
        attached = {
            name: {v.get("name") for v in (node.get("status") or {}).get("volumesAttached") or []}
            for name, node in snap.nodes.items()
        }
        for pod in snap.pods:
            node_name = kp.node_of(pod)
            if not node_name or not snap.live(node_name):
                continue
            if kp.is_terminating(pod):
                if kp.grace_elapsed(pod, snap.now):
                    out.append(Action(PODS, "pod-finalize", partial(self._finalize, pod)))
                continue
            if kp.is_finished(pod) or kp.is_running_ready(pod):
                continue
            volumes = kp.pod_volumes(pod, snap.pvcs, snap.pvs)
            if any(v.attached_name not in attached[node_name] for v in volumes):
                continue  # ContainerCreating until its volumes are attached here
            host_ip = kn.node_ip(snap.nodes[node_name])
            body = kp.running_status(pod, host_ip, snap.now)
            out.append(Action(PODS, "pod-running", partial(self._patch_pod_status, pod, body)))
        return out

    def _finalize(self, pod: dict[str, Any]) -> None:
        namespace, name = kp.pod_key(pod)
        uid = pod["metadata"].get("uid")
        body: dict[str, Any] = {"gracePeriodSeconds": 0}
        if uid:
            body["preconditions"] = {"uid": uid}
        rest.request(self.api, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=body)

    def _patch_pod_status(self, pod: dict[str, Any], body: dict[str, Any]) -> None:
        namespace, name = kp.pod_key(pod)
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/status"
        rest.request(self.api, "PATCH", path, body=body, content_type=STRATEGIC)

    # --- volumes ---
    def _volume_actions(self, snap: Snapshot) -> list[Action]:
        plans = plan_volumes(
            snap.nodes, snap.pods, snap.pvcs, snap.pvs, snap.vas, snap.live,
            self._unused_since, snap.now, self.detach_delay,
        )  # fmt: skip
        return [Action(VOLUMES, "volumes", partial(self._apply_volumes, plan)) for plan in plans]

    def _apply_volumes(self, plan: VolumePlan) -> None:
        for va in plan.create:
            try:
                rest.request(self.api, "POST", VA_PATH, body=va)
            except ApiException as err:
                if err.status != 409:
                    raise
        for name in plan.mark_attached:
            body = {"status": {"attached": True}}
            rest.request(self.api, "PATCH", f"{VA_PATH}/{name}/status", body=body, content_type=MERGE)
        for name in plan.delete:
            try:
                rest.request(self.api, "DELETE", f"{VA_PATH}/{name}")
            except ApiException as err:
                if err.status != 404:
                    raise
        if plan.volumes_attached is not None:
            self._patch_node_status(plan.node, {"volumesAttached": plan.volumes_attached})
