"""Drain scenarios of the deletion flow (reference §4.5) against the sandbox: PodDisruptionBudgets that
hold, refuse for good or are misconfigured, pods with volumes one at a time with detach waits, lost
drain progress, and the ways a drain becomes forced."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mcm_sandbox.procs import wait_until
from mcm_tasks import kinds
from mcm_tasks.api.constants import NODE_FINALIZER
from mcm_tasks.cache import get_listers
from mcm_tasks.controllers.common.context_io import list_objects
from mcm_tasks.controllers.machine.drain.state_io import PodProgress, drain_key
from mcm_tasks.kube.clients import get_clusters
from tests.integration.deletion.support import (
    Env,
    Trace,
    assert_all_gone,
    drive,
    index,
    reconfigure,
    unique,
)

pytestmark = pytest.mark.integration

# the sandbox's fixtures, under their names


def test_a_pdb_without_disruptions_holds_eviction_until_it_allows(env: Env) -> None:
    name = unique("hold")
    env.launch(name)
    env.core.patch_node(name, {"metadata": {"finalizers": [NODE_FINALIZER]}})
    env.run_pod("held", name, labels={"app": "hold"})
    env.run_pod("plain", name)
    env.run_pod("daemon", name, owner="DaemonSet")
    env.run_pod("mirror", name, annotations={"kubernetes.io/config.mirror": "x"})
    env.run_pod("peer-ready", "elsewhere", labels={"app": "hold"})
    env.run_pod("peer-starting", "elsewhere", labels={"app": "hold"})
    env.mark_ready("peer-ready")
    # 3 expected, 2 healthy, 2 must stay: nothing may go, but the budget is not misconfigured
    env.budget("hold", {"app": "hold"}, minAvailable=2)
    wait_until(lambda: env.running("held", "plain"), 15, what="pods running")
    wait_until(lambda: env.budget_status("hold").get("currentHealthy") == 2, 10, what="budget status")
    env.delete_machine(name)

    def attempts(_: Trace) -> int:
        raw = env.redis.hget(drain_key(f"default/{name}"), f"pod:{env.namespace}/held")
        return PodProgress.model_validate_json(str(raw)).attempts if raw else 0

    trace = drive(env, name, until=lambda t: env.pod("plain") is None and attempts(t) >= 5)
    assert env.pod("held") is not None
    machine = env.machine(name)
    assert machine is not None
    assert machine.status.current_status.phase == "Terminating"
    assert machine.status.last_operation.description == "Initiate node drain"
    node = env.node(name)
    assert node is not None and node["spec"]["unschedulable"] is True
    assert any(c["type"] == "Terminating" and c["status"] == "True" for c in node["status"]["conditions"])

    # losing the drain's progress only restarts the drain: the budget still holds
    env.redis.delete(drain_key(f"default/{name}"))
    drive(env, name, until=lambda t: attempts(t) >= 3, trace=trace)
    assert env.pod("held") is not None

    env.policy.patch_namespaced_pod_disruption_budget("hold", env.namespace, {"spec": {"minAvailable": 1}})
    drive(env, name, trace=trace)
    assert trace.descriptions[:2] == [
        "Set machine status to termination. Now, getting VM Status",
        "Initiate node drain",
    ]
    assert index(trace, "Drain successful. Initiate VM deletion") < index(trace, "VM deletion was successful")
    assert index(trace, "VM deletion was successful") < index(
        trace, f'Deletion of Node Object "{name}" is successful'
    )
    assert "Initiate machine object finalizer removal" in trace.descriptions[-1]
    assert env.pod("held") is None
    assert env.pod("daemon") is not None and env.pod("mirror") is not None  # never drained
    assert_all_gone(env, name)
    reasons = [reason for reason, _ in env.events(name)]
    assert "DrainStarted" in reasons and "DrainSucceeded" in reasons
    assert "MachineTerminating" in reasons


@pytest.mark.parametrize("from_mirror", [False, True], ids=["live", "mirror"])
def test_a_misconfigured_pdb_fails_that_pod_and_the_drain_is_forced_after_the_timeout(
    env: Env, request: pytest.FixtureRequest, from_mirror: bool
) -> None:
    if from_mirror:
        request.getfixturevalue("mirror")
    name = unique("miscfg")
    env.launch(name, spec={"drainTimeout": "4s"})
    env.run_pod("stuck", name, labels={"app": "stuck"})
    env.run_pod("free", name)
    env.budget("zero", {"app": "stuck"}, maxUnavailable=0)
    wait_until(lambda: env.running("stuck", "free"), 15, what="pods running")
    wait_until(lambda: env.budget_status("zero").get("currentHealthy") == 1, 10, what="budget status")
    env.delete_machine(name)

    def observe(trace: Trace) -> None:
        if "free_at_failure" not in trace.notes and any("Drain failed" in d for d in trace.descriptions):
            trace.notes["free_at_failure"] = env.pod("free")
            trace.notes["stuck_at_failure"] = env.pod("stuck")

    trace = drive(env, name, observe=observe)
    failure = trace.descriptions[index(trace, "Drain failed")]
    assert failure == (
        f'Drain failed due to - error while evicting pod "stuck": pod disruption budget {env.namespace}/zero '
        "is misconfigured and requires zero voluntary evictions. Will retry in next sync. Initiate node drain"
    )
    assert trace.notes["free_at_failure"] is None  # the other pod was drained all the same
    assert trace.notes["stuck_at_failure"] is not None  # the failing one was never evicted
    forced = index(trace, "Force Drain successful. Delete Volume Attachments")
    assert index(trace, "Drain failed") < forced < index(trace, "VM deletion was successful")
    assert env.pod("stuck") is None
    assert_all_gone(env, name)
    reasons = [reason for reason, _ in env.events(name)]
    assert "DrainFailed" in reasons


@pytest.mark.parametrize("from_mirror", [False, True], ids=["live", "mirror"])
def test_pods_with_volumes_are_evicted_one_by_one_and_wait_for_detach(
    env: Env, request: pytest.FixtureRequest, from_mirror: bool
) -> None:
    if from_mirror:
        request.getfixturevalue("mirror")
        assert get_listers().pods.synced()
    name = unique("vols")
    env.launch(name)
    env.volume(f"{name}-high", f"vol-high-{name}")
    env.volume(f"{name}-none", f"vol-none-{name}")
    env.run_pod("high", name, claim=f"{name}-high", priority=1000)
    env.run_pod("none", name, claim=f"{name}-none")  # no priority at all: sorts as 0, must not crash
    env.run_pod("novol", name)
    wait_until(lambda: env.running("high", "none", "novol"), 15, what="pods running with volumes attached")
    env.delete_machine(name)

    def attached() -> list[str]:
        return [v["name"] for v in ((env.node(name) or {}).get("status") or {}).get("volumesAttached") or []]

    def observe(trace: Trace) -> None:
        for pod in ("high", "none"):
            found = env.pod(pod)
            leaving = found is None or found["metadata"].get("deletionTimestamp") is not None
            if leaving and pod not in trace.notes:
                trace.notes[pod] = (trace.rounds, attached())

    trace = drive(env, name, observe=observe)
    high_round, _ = trace.notes["high"]
    none_round, attached_then = trace.notes["none"]
    assert high_round < none_round  # highest priority first
    assert not any(f"vol-high-{name}" in v for v in attached_then)  # the first volume had detached
    assert index(trace, "Drain successful. Initiate VM deletion") < index(trace, "VM deletion was successful")
    assert_all_gone(env, name)
    warnings = [message for reason, message in env.events(name) if reason == "DrainWarning"]
    assert any("reattach" in w for w in warnings)  # no other node to take the volumes: warned, not failed


@pytest.mark.parametrize("env", [{"detach_delay": 2.0}], indirect=True)
def test_lost_progress_never_lets_the_drain_end_under_an_attached_volume(env: Env) -> None:
    name = unique("lost")
    env.launch(name)
    env.volume(f"{name}-d", f"vol-d-{name}")
    env.run_pod("disk", name, claim=f"{name}-d")
    wait_until(lambda: env.running("disk"), 15, what="pod running with its volume")
    env.delete_machine(name)

    def on_node() -> list[Any]:
        return [va for va in env.storage.list_volume_attachment().items if va.spec.node_name == name]

    trace = drive(env, name, until=lambda t: env.pod("disk") is None)
    assert on_node()  # the pod is gone, its volume is still detaching (2 s)
    env.redis.delete(drain_key(f"default/{name}"))  # the record of that wait is lost

    def observe(trace: Trace) -> None:
        if "at_success" not in trace.notes and any("Drain successful" in d for d in trace.descriptions):
            trace.notes["at_success"] = on_node()

    drive(env, name, observe=observe, trace=trace)
    assert trace.notes["at_success"] == []  # the detach barrier waited for it
    assert_all_gone(env, name)


def test_eviction_refused_max_evict_retries_times_deletes_the_pod(env: Env) -> None:
    name = unique("retries")
    env.launch(name, spec={"maxEvictRetries": 3})
    env.run_pod("held", name, labels={"app": "held"})
    env.run_pod("peer", "elsewhere", labels={"app": "held"})
    env.budget("hold", {"app": "held"}, minAvailable=1)  # 2 expected, 1 healthy, 1 must stay
    wait_until(lambda: env.running("held"), 15, what="pod running")
    wait_until(lambda: env.budget_status("hold").get("currentHealthy") == 1, 10, what="budget status")
    env.delete_machine(name)
    started = time.monotonic()
    trace = drive(env, name)
    # three refusals 0.2 s apart, then deleted: long before the 60 s drain timeout would force it
    assert time.monotonic() - started < 20
    assert "Drain successful. Initiate VM deletion" in trace.descriptions
    assert not any("Force" in d or "failed" in d for d in trace.descriptions)
    assert env.pod("held") is None
    assert_all_gone(env, name)


def test_a_node_not_ready_for_long_forces_the_drain(env: Env) -> None:
    reconfigure(env, force_drain_unhealthy_after="0.5s")
    name = unique("notready")
    env.launch(name)
    env.run_pod("stuck", name, labels={"app": "stuck"})
    env.budget("zero", {"app": "stuck"}, maxUnavailable=0)  # would fail a normal drain
    wait_until(lambda: env.running("stuck"), 15, what="pod running")
    env.core.patch_node(
        name, {"metadata": {"annotations": {"sandbox.mcm-tasks.io/condition-Ready": "False"}}}
    )

    def not_ready() -> bool:
        conditions = ((env.node(name) or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "False" for c in conditions)

    wait_until(not_ready, 10, what="node NotReady")
    env.delete_machine(name)
    trace = drive(env, name)
    assert index(trace, "Force Drain successful. Delete Volume Attachments") < index(trace, "VM deletion")
    assert env.pod("stuck") is None
    assert_all_gone(env, name)
    started = [m for reason, m in env.events(name) if reason == "DrainStarted"]
    assert any("NotReady" in m for m in started)


@pytest.mark.parametrize("from_mirror", [False, True], ids=["unsynced", "mirror"])
def test_list_objects_reads_the_mirror_only_when_complete_and_not_live(
    env: Env, request: pytest.FixtureRequest, from_mirror: bool
) -> None:
    """``context.list_objects``, the one list reader: the mirror once the kind is synced, else (and
    always when ``live``) one LIST from the API server."""
    if from_mirror:
        request.getfixturevalue("mirror")
    name = unique("lister")
    env.launch(name)
    lister = get_listers().nodes
    api = get_clusters().target.api  # type: ignore[union-attr]
    marker = {"metadata": {"name": "from-the-mirror"}}

    def names(**kw: Any) -> set[str]:
        return {
            n["metadata"]["name"]
            for n in list_objects(lister, api, kinds.NODE.resource, mirror=lambda: [marker], **kw)
        }

    wait_until(lambda: from_mirror == lister.synced(), 15, what="the nodes' mirror state")
    assert names() == ({"from-the-mirror"} if from_mirror else names(live=True))
    assert name in names(live=True) and "from-the-mirror" not in names(live=True)
