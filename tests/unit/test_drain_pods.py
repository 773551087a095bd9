"""Per-pod drain rules (drain_pods): removal choice, misconfigured PDBs, answers → next state, waits."""

# ruff: noqa: E501 - the tables read best one case per line

from __future__ import annotations

from typing import Any

import pytest

from mcm_tasks.controllers.machine.drain import pods as dp
from mcm_tasks.controllers.machine.drain.force import DrainParams
from mcm_tasks.controllers.machine.drain.state_io import PodProgress

NOW = 1000.0
NORMAL = DrainParams(timeout=600.0, max_evict_retries=3)
FORCED = DrainParams(timeout=60.0, max_evict_retries=1, force_reason="label")
TIMING = dp.Timing(retry_interval=20.0, detach_timeout=120.0, reattach_timeout=90.0)
NODE = "node-a"


def pod(name: str = "p", labels: dict[str, str] | None = None, namespace: str = "ns") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels or {}},
        "spec": {"nodeName": NODE},
    }


def pdb(
    *,
    generation: int = 1,
    observed: int = 1,
    expected: int = 2,
    healthy: int = 2,
    allowed: int = 0,
    disrupted: dict[str, str] | None = None,
    selector: Any = None,
    namespace: str = "ns",
    name: str = "budget",
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "generation": generation},
        "spec": {"selector": {"matchLabels": {"app": "a"}} if selector is None else selector},
        "status": {
            "observedGeneration": observed,
            "expectedPods": expected,
            "currentHealthy": healthy,
            "disruptionsAllowed": allowed,
            "disruptedPods": disrupted or {},
        },
    }


# --- PodDisruptionBudgets ---


@pytest.mark.parametrize(
    ("budget", "misconfigured"),
    [
        (pdb(), True),
        (pdb(healthy=3), True),  # scale-down in progress: more healthy than expected
        (pdb(allowed=1), False),
        (pdb(healthy=1), False),  # not all healthy: the budget may allow later
        (pdb(expected=0, healthy=0), False),  # no pods
        (pdb(observed=0), False),  # status not caught up with the spec
        (pdb(disrupted={"x": "2025-01-01T00:00:00Z"}), False),  # an eviction in flight
    ],
)
def test_is_misconfigured_pdb(budget: dict[str, Any], misconfigured: bool) -> None:
    assert dp.is_misconfigured_pdb(budget) is misconfigured


def test_misconfigured_pdb_with_empty_status_is_not() -> None:
    assert not dp.is_misconfigured_pdb({"metadata": {"generation": 1}, "status": {}})


@pytest.mark.parametrize(
    ("selector", "labels", "namespace", "selects"),
    [
        ({"matchLabels": {"app": "a"}}, {"app": "a"}, "ns", True),
        ({"matchLabels": {"app": "a"}}, {"app": "b"}, "ns", False),
        ({"matchLabels": {"app": "a"}}, {"app": "a"}, "other", False),
        ({}, {"anything": "x"}, "ns", True),  # policy/v1: empty selects all
        (
            {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]},
            {"app": "b"},
            "ns",
            True,
        ),
        ({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}, {"app": "b"}, "ns", False),
    ],
)
def test_pdb_selects(selector: dict[str, Any], labels: dict[str, str], namespace: str, selects: bool) -> None:
    assert dp.pdb_selects(pdb(selector=selector), pod(labels=labels, namespace=namespace)) is selects


def test_pdb_without_selector_selects_nothing() -> None:
    budget = pdb()
    del budget["spec"]["selector"]
    assert not dp.pdb_selects(budget, pod(labels={"app": "a"}))


def test_pdb_for_pod_first_by_name() -> None:
    a, b = pdb(name="b-budget"), pdb(name="a-budget")
    found = dp.pdb_for_pod(
        [a, b, pdb(name="other", selector={"matchLabels": {"x": "y"}})], pod(labels={"app": "a"})
    )
    assert found is b
    assert dp.pdb_for_pod([], pod()) is None


# --- removal choice ---


@pytest.mark.parametrize(
    ("attempts", "params", "removal"),
    [
        (0, NORMAL, dp.Removal.EVICT),
        (2, NORMAL, dp.Removal.EVICT),
        (3, NORMAL, dp.Removal.DELETE),
        (0, FORCED, dp.Removal.DELETE),
        (0, DrainParams(timeout=10.0, max_evict_retries=0), dp.Removal.DELETE),
    ],
)
def test_removal_for(attempts: int, params: DrainParams, removal: dp.Removal) -> None:
    assert dp.removal_for(PodProgress(uid="u", attempts=attempts), params) is removal


@pytest.mark.parametrize(
    ("record", "due"),
    [
        (PodProgress(uid="u"), True),
        (PodProgress(uid="u", next_attempt_at=NOW + 1), False),
        (PodProgress(uid="u", next_attempt_at=NOW), True),
        (PodProgress(uid="u", removed_at=NOW - 1), False),
        (PodProgress(uid="u", done=True), False),
        (PodProgress(uid="u", error="x"), False),
    ],
)
def test_is_due(record: PodProgress, due: bool) -> None:
    assert dp.is_due(record, NOW) is due


# --- answers ---

MISCONFIGURED = pdb()
HOLDING = pdb(healthy=1)


@pytest.mark.parametrize(
    ("volumes", "removal", "reply", "budget", "params", "expect"),
    [
        # accepted: on its way, waited for
        (False, dp.Removal.EVICT, dp.Reply(dp.Answer.OK), None, NORMAL, {"removed_at": NOW, "deleted": False}),
        (False, dp.Removal.DELETE, dp.Reply(dp.Answer.OK), None, NORMAL, {"removed_at": NOW, "deleted": True}),
        (True, dp.Removal.EVICT, dp.Reply(dp.Answer.OK), None, NORMAL, {"removed_at": NOW}),
        # forced: deleted is done, nothing waited for
        (True, dp.Removal.DELETE, dp.Reply(dp.Answer.OK), None, FORCED, {"done": True, "deleted": True}),
        # already gone
        (False, dp.Removal.EVICT, dp.Reply(dp.Answer.NOT_FOUND), None, NORMAL, {"done": True}),
        (True, dp.Removal.DELETE, dp.Reply(dp.Answer.NOT_FOUND), None, NORMAL, {"done": True}),
        # refused by a budget that may allow later: retried after the interval
        (False, dp.Removal.EVICT, dp.Reply(dp.Answer.TOO_MANY_REQUESTS), HOLDING, NORMAL,
         {"attempts": 2, "next_attempt_at": NOW + 20.0}),
        (False, dp.Removal.EVICT, dp.Reply(dp.Answer.TOO_MANY_REQUESTS), None, NORMAL,
         {"attempts": 2, "next_attempt_at": NOW + 20.0}),
        (True, dp.Removal.EVICT, dp.Reply(dp.Answer.TOO_MANY_REQUESTS), HOLDING, NORMAL, {"attempts": 2}),
        # refused by a misconfigured budget: failed at once, with or without volumes
        (False, dp.Removal.EVICT, dp.Reply(dp.Answer.TOO_MANY_REQUESTS), MISCONFIGURED, NORMAL,
         {"error": 'error while evicting pod "p": pod disruption budget ns/budget is misconfigured and '
          "requires zero voluntary evictions"}),
        (True, dp.Removal.EVICT, dp.Reply(dp.Answer.TOO_MANY_REQUESTS), MISCONFIGURED, NORMAL,
         {"error": 'error while evicting pod "p": pod disruption budget ns/budget is misconfigured and '
          "requires zero voluntary evictions"}),
        # other errors: fail a pod without volumes, retry one with volumes
        (False, dp.Removal.EVICT, dp.Reply(dp.Answer.ERROR, "500 InternalError: two budgets"), None, NORMAL,
         {"error": 'error when evicting pod "p": 500 InternalError: two budgets scheduled on node node-a'}),
        (True, dp.Removal.EVICT, dp.Reply(dp.Answer.ERROR, "500"), None, NORMAL, {"attempts": 2}),
        (True, dp.Removal.DELETE, dp.Reply(dp.Answer.ERROR, "500"), None, NORMAL,
         {"error": 'error when deleting pod "p": 500 scheduled on node node-a'}),
        (False, dp.Removal.DELETE, dp.Reply(dp.Answer.ERROR, "403"), None, FORCED,
         {"error": 'error when deleting pod "p": 403 scheduled on node node-a'}),
    ],
)  # fmt: skip
def test_after_reply(
    volumes: bool,
    removal: dp.Removal,
    reply: dp.Reply,
    budget: dict[str, Any] | None,
    params: DrainParams,
    expect: dict[str, Any],
) -> None:
    before = PodProgress(uid="uid-p", volumes=volumes, attempts=1)
    after = dp.after_reply(before, pod(), removal, reply, budget, params, TIMING, NOW)
    for field, value in expect.items():
        assert getattr(after, field) == value, field
    assert before.attempts == 1  # pure: the input is untouched


# --- waiting ---

ATTACHED_NODE = {
    "metadata": {"name": NODE},
    "status": {"volumesAttached": [{"name": "kubernetes.io/csi/local.csi^vol-1", "devicePath": ""}]},
}
DETACHED_NODE = {"metadata": {"name": NODE}, "status": {}}
ELSEWHERE = {
    "metadata": {"name": "va-x"},
    "spec": {"nodeName": "node-b", "source": {"persistentVolumeName": "pv-1"}},
    "status": {"attached": True},
}


def observe(
    record: PodProgress, present: bool, node: dict[str, Any] | None, vas: list[Any], now: float
) -> PodProgress:
    return dp.observe(record, pod() if present else None, node, vas, NODE, NORMAL, TIMING, now)


@pytest.mark.parametrize(
    ("record", "present", "node", "vas", "now", "expect"),
    [
        # without volumes: done when gone, failed after min(grace, timeout) + 30 s
        (PodProgress(uid="u", removed_at=900.0, grace=30), False, DETACHED_NODE, [], NOW, {"done": True}),
        (PodProgress(uid="u", removed_at=900.0, grace=30), True, DETACHED_NODE, [], 959.0, {"done": False}),
        (PodProgress(uid="u", removed_at=900.0, grace=30), True, DETACHED_NODE, [], 961.0,
         {"error": 'timeout expired while waiting for pod "p" terminating scheduled on node node-a'}),
        (PodProgress(uid="u", removed_at=0.0, grace=9999), True, DETACHED_NODE, [], 629.0, {"error": ""}),
        (PodProgress(uid="u", removed_at=0.0, grace=9999), True, DETACHED_NODE, [], 631.0,
         {"error": 'timeout expired while waiting for pod "p" terminating scheduled on node node-a'}),
        (PodProgress(uid="u"), False, DETACHED_NODE, [], NOW, {"done": True}),  # gone before its turn
        (PodProgress(uid="u"), True, DETACHED_NODE, [], NOW, {"done": False}),
        # with volumes: wait for detach (grace + detach timeout), then reattach (only a warning)
        (PodProgress(uid="u", volumes=True, removed_at=NOW, grace=30, volume_ids=["vol-1"]), True,
         ATTACHED_NODE, [], NOW + 149, {"detached_at": None, "error": ""}),
        (PodProgress(uid="u", volumes=True, removed_at=NOW, grace=30, volume_ids=["vol-1"]), False,
         ATTACHED_NODE, [], NOW + 151, {"error": "timeout while waiting for PVs to detach from node"}),
        (PodProgress(uid="u", volumes=True, removed_at=NOW, volume_ids=["vol-1"], pv_names=["pv-1"]), True,
         DETACHED_NODE, [], NOW + 5, {"detached_at": NOW + 5, "done": False}),
        (PodProgress(uid="u", volumes=True, removed_at=NOW, volume_ids=["vol-1"], pv_names=["pv-1"]), True,
         DETACHED_NODE, [ELSEWHERE], NOW + 5, {"done": True, "warning": ""}),
        (PodProgress(uid="u", volumes=True, removed_at=NOW, detached_at=NOW, pv_names=["pv-1"]), False,
         DETACHED_NODE, [], NOW + 91, {"done": True, "warning": dp.REATTACH_TIMEOUT_WARNING}),
        (PodProgress(uid="u", volumes=True, removed_at=NOW, detached_at=NOW, pv_names=["pv-1"]), False,
         DETACHED_NODE, [], NOW + 89, {"done": False}),
        (PodProgress(uid="u", volumes=True, removed_at=NOW), True, DETACHED_NODE, [], NOW, {"done": True}),
        # with volumes, node gone: an evicted pod is drained; one not yet evicted still is evicted
        (PodProgress(uid="u", volumes=True, removed_at=NOW, volume_ids=["vol-1"]), True, None, [], NOW,
         {"done": True}),
        (PodProgress(uid="u", volumes=True), True, None, [], NOW, {"done": False}),
        (PodProgress(uid="u", volumes=True), False, None, [], NOW, {"done": True}),
        (PodProgress(uid="u", volumes=True), False, DETACHED_NODE, [], NOW, {"done": True}),
        # resolved stays resolved
        (PodProgress(uid="u", error="x"), False, DETACHED_NODE, [], NOW, {"error": "x", "done": False}),
    ],
)  # fmt: skip
def test_observe(
    record: PodProgress,
    present: bool,
    node: dict[str, Any] | None,
    vas: list[Any],
    now: float,
    expect: dict[str, Any],
) -> None:
    after = observe(record, present, node, vas, now)
    for field, value in expect.items():
        assert getattr(after, field) == value, field


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (PodProgress(uid="u", done=True), None),
        (PodProgress(uid="u", next_attempt_at=NOW + 7), 7.0),
        (PodProgress(uid="u", next_attempt_at=NOW - 7), 0.0),
        (PodProgress(uid="u", removed_at=NOW, grace=30), 5.0),  # poll
        (
            PodProgress(uid="u", removed_at=NOW - 628.0, grace=9999),
            pytest.approx(2.001),
        ),  # the deadline is closer
        (PodProgress(uid="u", volumes=True, removed_at=NOW), 5.0),
        (PodProgress(uid="u", volumes=True, removed_at=NOW - 119, grace=0), pytest.approx(1.001)),
        (PodProgress(uid="u", volumes=True, removed_at=NOW, detached_at=NOW - 88), pytest.approx(2.001)),
    ],
)
def test_wake_in(record: PodProgress, expected: Any) -> None:
    assert dp.wake_in(record, NORMAL, TIMING, 5.0, NOW) == expected
