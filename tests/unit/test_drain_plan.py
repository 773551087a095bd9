"""A drain round as pure functions (drain_plan): tracking, the serial lane for pods with volumes,
parallel removals for the rest, and the conclusion with its detach barrier."""

from __future__ import annotations

from typing import Any

from mcm_tasks.controllers.machine.drain import plan
from mcm_tasks.controllers.machine.drain import pods as dp
from mcm_tasks.controllers.machine.drain.force import DrainParams
from mcm_tasks.controllers.machine.drain.state_io import DrainProgress, PodProgress

NOW = 1000.0
NODE = "node-a"
NORMAL = DrainParams(timeout=600.0, max_evict_retries=3)
FORCED = DrainParams(timeout=60.0, max_evict_retries=1, force_reason="label")
TIMING = dp.Timing(retry_interval=20.0, detach_timeout=120.0, reattach_timeout=90.0)
NODE_OBJ: dict[str, Any] = {"metadata": {"name": NODE}, "status": {}}
PVC = [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]


def pod(name: str, *, volumes: bool = False, priority: int | None = None, uid: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": NODE, "volumes": PVC if volumes else []}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}"}, "spec": spec}


def progress(**records: PodProgress) -> DrainProgress:
    return DrainProgress(
        machine_uid="m", node=NODE, started_at=NOW, pods={f"ns/{k}": v for k, v in records.items()}
    )


def by_key(*pods: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"ns/{p['metadata']['name']}": p for p in pods}


def test_track_adds_new_pods_with_their_volumes_and_replaces_namesakes() -> None:
    start = progress(a=PodProgress(uid="uid-a", attempts=2), b=PodProgress(uid="old-b", attempts=5))
    pods = [pod("a"), pod("b"), pod("c", volumes=True)]
    assert [p["metadata"]["name"] for p in plan.untracked(start, pods)] == ["c"]
    tracked = plan.track(start, pods, {"ns/c": plan.VolumeInfo(("pv-1",), ("vol-1",))})
    assert tracked.pods["ns/a"].attempts == 2  # kept
    assert tracked.pods["ns/b"] == PodProgress(uid="uid-b")  # a new pod under the old name
    assert tracked.pods["ns/c"].volumes
    assert tracked.pods["ns/c"].pv_names == ["pv-1"]
    assert tracked.pods["ns/c"].volume_ids == ["vol-1"]
    assert start.pods["ns/b"].attempts == 5  # pure


def test_pods_without_volumes_are_removed_in_parallel() -> None:
    pods = [pod("a"), pod("b"), pod("c")]
    state = plan.track(progress(), pods, {})
    due = plan.due_removals(state, by_key(*pods), NODE_OBJ, NORMAL, NOW)
    assert due == [("ns/a", dp.Removal.EVICT), ("ns/b", dp.Removal.EVICT), ("ns/c", dp.Removal.EVICT)]


def test_pods_with_volumes_go_one_at_a_time_by_priority() -> None:
    pods = [
        pod("low", volumes=True, priority=1),
        pod("none", volumes=True),
        pod("high", volumes=True, priority=9),
    ]
    state = plan.track(progress(), pods, {})
    due = plan.due_removals(state, by_key(*pods), NODE_OBJ, NORMAL, NOW)
    assert due == [("ns/high", dp.Removal.EVICT)]
    # high is in flight: nobody else goes
    state.pods["ns/high"] = state.pods["ns/high"].model_copy(update={"removed_at": NOW})
    assert plan.due_removals(state, by_key(*pods), NODE_OBJ, NORMAL, NOW) == []
    # high is done: next is low (priority 1 beats a missing priority, which counts as 0)
    state.pods["ns/high"] = state.pods["ns/high"].model_copy(update={"done": True})
    assert plan.due_removals(state, by_key(*pods), NODE_OBJ, NORMAL, NOW) == [("ns/low", dp.Removal.EVICT)]


def test_a_refused_pod_with_volumes_lets_the_next_one_go() -> None:
    pods = [pod("a", volumes=True, priority=5), pod("b", volumes=True)]
    state = plan.track(progress(), pods, {})
    state.pods["ns/a"] = state.pods["ns/a"].model_copy(update={"attempts": 1, "next_attempt_at": NOW + 20})
    assert plan.due_removals(state, by_key(*pods), NODE_OBJ, NORMAL, NOW) == [("ns/b", dp.Removal.EVICT)]


def test_forced_and_nodeless_drains_have_no_serial_lane() -> None:
    pods = [pod("a", volumes=True), pod("b", volumes=True), pod("c")]
    state = plan.track(progress(), pods, {})
    forced = plan.due_removals(state, by_key(*pods), NODE_OBJ, FORCED, NOW)
    assert forced == [("ns/a", dp.Removal.DELETE), ("ns/b", dp.Removal.DELETE), ("ns/c", dp.Removal.DELETE)]
    gone = plan.due_removals(state, by_key(*pods), None, NORMAL, NOW)
    assert [k for k, _ in gone] == ["ns/a", "ns/b", "ns/c"]


def test_retries_exhausted_means_delete() -> None:
    pods = [pod("a")]
    state = plan.track(progress(), pods, {})
    state.pods["ns/a"] = state.pods["ns/a"].model_copy(update={"attempts": 3})
    assert plan.due_removals(state, by_key(*pods), NODE_OBJ, NORMAL, NOW) == [("ns/a", dp.Removal.DELETE)]


def test_gone_pods_are_not_removed_and_count_done() -> None:
    state = plan.track(progress(), [pod("a"), pod("b")], {})
    present = by_key(pod("b"), pod("a", uid="someone-else"))
    assert plan.due_removals(state, present, NODE_OBJ, NORMAL, NOW) == [("ns/b", dp.Removal.EVICT)]
    seen = plan.observe_all(state, present, NODE_OBJ, [], NORMAL, TIMING, NOW)
    assert seen.pods["ns/a"].done
    assert not seen.pods["ns/b"].done


def conclude(
    state: DrainProgress,
    params: DrainParams = NORMAL,
    vas: list[Any] | None = None,
    node: Any = NODE_OBJ,
    in_use: list[str] | None = None,
    now: float = NOW,
) -> plan.Conclusion:
    return plan.conclude(state, node, vas or [], in_use or [], params, TIMING, 5.0, now)


def test_conclusion_waits_for_unresolved_pods() -> None:
    state = progress(a=PodProgress(uid="a", next_attempt_at=NOW + 12), b=PodProgress(uid="b", done=True))
    found = conclude(state)
    assert not found.done
    assert found.wake_in == 12.0


def test_conclusion_does_not_wake_for_pods_queued_behind_the_one_in_flight() -> None:
    state = progress(
        a=PodProgress(uid="a", volumes=True, removed_at=NOW),  # in flight: poll
        b=PodProgress(uid="b", volumes=True),  # waits for the lane, not for a timer
    )
    assert conclude(state).wake_in == 5.0


def test_conclusion_success_failure_and_warnings() -> None:
    ok = conclude(progress(a=PodProgress(uid="a", done=True, warning="w"), b=PodProgress(uid="b", done=True)))
    assert ok.done
    assert ok.errors == []
    assert ok.warnings == ["w"]
    failed = conclude(progress(b=PodProgress(uid="b", error="e2"), a=PodProgress(uid="a", error="e1")))
    assert failed.done
    assert failed.errors == ["e1", "e2"]
    assert conclude(progress()).done  # nothing to drain


DRAINED_VA = {
    "metadata": {"name": "va-1"},
    "spec": {"nodeName": NODE, "source": {"persistentVolumeName": "pv-1"}},
    "status": {"attached": True},
}


def test_detach_barrier_holds_a_normal_drain_until_attachments_are_gone() -> None:
    state = progress(a=PodProgress(uid="a", done=True))
    held = conclude(state, vas=[DRAINED_VA])
    assert not held.done
    assert held.barrier_since == NOW
    state.barrier_since = NOW
    assert not conclude(state, vas=[DRAINED_VA], now=NOW + 119).done
    given_up = conclude(state, vas=[DRAINED_VA], now=NOW + 121)
    assert given_up.done
    assert given_up.errors == []
    assert "va-1" in given_up.warnings[0]
    assert conclude(state, vas=[DRAINED_VA], in_use=["pv-1"]).done  # used by a pod that stays
    assert conclude(state, vas=[]).done


def test_detach_barrier_does_not_apply_to_forced_or_failed_drains_or_a_missing_node() -> None:
    done = progress(a=PodProgress(uid="a", done=True))
    assert conclude(done, params=FORCED, vas=[DRAINED_VA]).done
    assert conclude(done, node=None, vas=[DRAINED_VA]).done
    failed = conclude(progress(a=PodProgress(uid="a", error="x")), vas=[DRAINED_VA])
    assert failed.done
    assert failed.errors == ["x"]
