from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_sandbox.policy import (
    EVICTION_VIOLATES_BUDGET,
    MULTIPLE_BUDGETS,
    can_ignore_pdb,
    eviction_decision,
    expected_and_desired,
    format_time,
    is_pod_ready,
    pdb_selects,
    pdb_status,
    record_eviction,
    scaled_value,
)

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def pod(
    name: str,
    ready: bool = True,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    namespace: str = "ns",
    terminating: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {"app": "web"}}
    if terminating:
        meta["deletionTimestamp"] = format_time(NOW)
    return {
        "metadata": meta,
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pdb(
    name: str = "budget",
    selector: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    generation: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "generation": generation},
        "spec": {"selector": {"matchLabels": {"app": "web"}} if selector is None else selector, **spec},
        "status": status or {},
    }


# --------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("value", "total", "expected"),
    [(3, 10, 3), ("50%", 10, 5), ("50%", 5, 3), ("10%", 1, 1), ("0%", 7, 0), ("100%", 7, 7), ("33%", 10, 4)],
)
def test_scaled_value_rounds_percentages_up(value: int | str, total: int, expected: int) -> None:
    assert scaled_value(value, total) == expected


@pytest.mark.parametrize("value", ["5", "x%", True])
def test_scaled_value_rejects_non_percent_strings(value: Any) -> None:
    with pytest.raises(ValueError):
        scaled_value(value, 10)


@pytest.mark.parametrize(
    ("spec", "selected", "scale", "expected"),
    [
        ({"minAvailable": 2}, 5, None, (5, 2)),
        ({"minAvailable": "50%"}, 5, None, (5, 3)),
        ({"minAvailable": "50%"}, 5, 10, (10, 5)),
        ({"maxUnavailable": 1}, 5, None, (5, 4)),
        ({"maxUnavailable": "25%"}, 5, None, (5, 3)),
        ({"maxUnavailable": "25%"}, 3, None, (3, 2)),
        ({"maxUnavailable": 10}, 3, None, (3, 0)),
        ({"minAvailable": 2}, 5, 10, (5, 2)),
        ({}, 5, None, (0, 0)),
    ],
)
def test_expected_and_desired(
    spec: dict[str, Any], selected: int, scale: int | None, expected: tuple[int, int]
) -> None:
    assert expected_and_desired(spec, selected, scale) == expected


def test_is_pod_ready_and_selection() -> None:
    assert is_pod_ready(pod("a")) and not is_pod_ready(pod("a", ready=False))
    assert not is_pod_ready({"status": {}})
    assert pdb_selects(pdb(), pod("a"))
    assert not pdb_selects(pdb(), pod("a", labels={"app": "db"}))
    assert not pdb_selects(pdb(), pod("a", namespace="other"))
    assert pdb_selects(pdb(selector={}), pod("a", labels={"anything": "x"}))
    nil = pdb()
    nil["spec"]["selector"] = None
    assert not pdb_selects(nil, pod("a"))
    bad = pdb(selector={"matchExpressions": [{"key": "app", "operator": "Bogus"}]})
    assert not pdb_selects(bad, pod("a"))


# --------------------------------------------------------------------------- pdb status


def test_status_min_available() -> None:
    pods = [
        pod("a"),
        pod("b"),
        pod("c", ready=False),
        pod("x", labels={"app": "db"}),
        pod("y", namespace="o"),
    ]
    status = pdb_status(pdb(minAvailable=1, generation=3), pods, NOW)
    assert status["currentHealthy"] == 2
    assert status["desiredHealthy"] == 1
    assert status["expectedPods"] == 3
    assert status["disruptionsAllowed"] == 1
    assert status["observedGeneration"] == 3
    assert "disruptedPods" not in status
    [condition] = status["conditions"]
    assert condition == {
        "type": "DisruptionAllowed",
        "status": "True",
        "reason": "SufficientPods",
        "message": "",
        "observedGeneration": 3,
        "lastTransitionTime": "2024-05-01T12:00:00Z",
    }


def test_status_insufficient_pods() -> None:
    status = pdb_status(pdb(minAvailable=2), [pod("a"), pod("b", ready=False)], NOW)
    assert status["disruptionsAllowed"] == 0
    assert status["conditions"][0]["status"] == "False"
    assert status["conditions"][0]["reason"] == "InsufficientPods"


def test_status_max_unavailable_percent() -> None:
    pods = [pod(str(i)) for i in range(4)]
    status = pdb_status(pdb(maxUnavailable="30%"), pods, NOW)
    assert (status["expectedPods"], status["desiredHealthy"], status["disruptionsAllowed"]) == (4, 2, 2)


def test_status_terminating_pods_are_not_healthy() -> None:
    status = pdb_status(pdb(minAvailable=1), [pod("a"), pod("b", terminating=True)], NOW)
    assert status["currentHealthy"] == 1 and status["disruptionsAllowed"] == 0


def test_status_no_pods_never_allows() -> None:
    status = pdb_status(pdb(maxUnavailable=1), [], NOW)
    assert status["expectedPods"] == 0 and status["disruptionsAllowed"] == 0


def test_status_disrupted_pods_count_until_timeout() -> None:
    recent = format_time(NOW - timedelta(seconds=30))
    stale = format_time(NOW - timedelta(minutes=3))
    existing = {"disruptedPods": {"a": recent, "b": stale, "gone": recent}}
    pods = [pod("a"), pod("b"), pod("c")]
    status = pdb_status(pdb(minAvailable=1, status=existing), pods, NOW)
    assert status["disruptedPods"] == {"a": recent}
    assert status["currentHealthy"] == 2
    assert status["disruptionsAllowed"] == 1


def test_status_condition_transition_time_moves_only_on_change() -> None:
    earlier = NOW - timedelta(hours=1)
    budget = pdb(minAvailable=1)
    budget["status"] = pdb_status(budget, [pod("a"), pod("b")], earlier)
    same = pdb_status(budget, [pod("a"), pod("b"), pod("c")], NOW)
    assert same["conditions"][0]["lastTransitionTime"] == format_time(earlier)
    flipped = pdb_status(budget, [pod("a")], NOW)
    assert flipped["conditions"][0]["lastTransitionTime"] == format_time(NOW)
    assert len(flipped["conditions"]) == 1


def test_status_invalid_budget_fails_safe() -> None:
    status = pdb_status(pdb(minAvailable="half"), [pod("a"), pod("b")], NOW)
    assert status["disruptionsAllowed"] == 0
    assert status["conditions"][0]["reason"] == "SyncFailed"
    assert "not a percentage" in status["conditions"][0]["message"]


def test_record_eviction() -> None:
    budget = pdb(minAvailable=1, status={"disruptionsAllowed": 1, "conditions": []})
    status = record_eviction(budget, "a", NOW)
    assert status["disruptionsAllowed"] == 0
    assert status["disruptedPods"] == {"a": "2024-05-01T12:00:00Z"}
    assert status["conditions"][0]["reason"] == "InsufficientPods"
    assert budget["status"]["disruptionsAllowed"] == 1


def test_eviction_round_trip_lowers_allowance_until_pod_is_gone() -> None:
    pods = [pod("a"), pod("b"), pod("c")]
    budget = pdb(minAvailable=2)
    budget["status"] = pdb_status(budget, pods, NOW)
    assert budget["status"]["disruptionsAllowed"] == 1
    decision = eviction_decision(pods[0], [budget])
    assert decision.allowed and decision.decrement and decision.pdb_name == "budget"
    budget["status"] = record_eviction(budget, "a", NOW)
    budget["status"] = pdb_status(budget, pods, NOW + timedelta(seconds=1))
    assert budget["status"]["disruptionsAllowed"] == 0
    refused = eviction_decision(pods[1], [budget])
    assert refused.code == 429


# --------------------------------------------------------------------------- eviction decision


def _ready_budget(**status: Any) -> dict[str, Any]:
    base = {"currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3, "disruptionsAllowed": 1}
    return pdb(minAvailable=2, status={**base, "observedGeneration": 1, **status})


def test_no_budget_allows() -> None:
    decision = eviction_decision(pod("a"), [pdb(selector={"matchLabels": {"app": "db"}})])
    assert decision.allowed and not decision.decrement and decision.code == 201
    assert decision.status()["status"] == "Success"


def test_two_budgets_is_500() -> None:
    decision = eviction_decision(pod("a"), [_ready_budget(), pdb(name="other", selector={})])
    assert not decision.allowed and decision.code == 500
    assert decision.message == MULTIPLE_BUDGETS
    assert decision.status()["code"] == 500 and "reason" not in decision.status()


def test_budget_exhausted_is_429_with_cause() -> None:
    decision = eviction_decision(pod("a"), [_ready_budget(disruptionsAllowed=0, currentHealthy=2)])
    assert not decision.allowed and decision.code == 429 and decision.reason == "TooManyRequests"
    status = decision.status()
    assert status["message"] == EVICTION_VIOLATES_BUDGET
    assert status["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget budget needs 2 healthy pods and has 2 currently",
        }
    ]


def test_budget_not_yet_observed_is_429_with_retry() -> None:
    decision = eviction_decision(pod("a"), [_ready_budget(observedGeneration=0)])
    assert decision.code == 429 and decision.retry_after_seconds == 10
    assert "still being processed" in decision.causes[0]["message"]
    assert decision.status()["details"]["retryAfterSeconds"] == 10


@pytest.mark.parametrize(
    "status",
    [{"disruptionsAllowed": -1}, {"disruptedPods": {f"p{i}": format_time(NOW) for i in range(2001)}}],
)
def test_broken_budget_status_is_403(status: dict[str, Any]) -> None:
    decision = eviction_decision(pod("a"), [_ready_budget(**status)])
    assert decision.code == 403 and decision.reason == "Forbidden"
    assert decision.status()["details"]["group"] == "policy"


@pytest.mark.parametrize(
    ("target", "require_rv"),
    [
        (pod("a", phase="Succeeded"), False),
        (pod("a", phase="Failed", ready=False), False),
        (pod("a", phase="Pending", ready=False), True),
        (pod("a", terminating=True), False),
    ],
)
def test_pods_that_ignore_budgets(target: dict[str, Any], require_rv: bool) -> None:
    assert can_ignore_pdb(target)
    decision = eviction_decision(target, [_ready_budget(disruptionsAllowed=0)])
    assert decision.allowed and not decision.decrement
    assert decision.require_resource_version is require_rv


@pytest.mark.parametrize(
    ("policy", "status", "allowed", "decrement"),
    [
        # IfHealthyBudget (the default): an unready pod may go while the app is not disrupted.
        (None, {"currentHealthy": 2, "desiredHealthy": 2, "disruptionsAllowed": 0}, True, False),
        ("IfHealthyBudget", {"currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1}, True, False),
        # ... but not when the budget is already short: then it needs an allowed disruption.
        (None, {"currentHealthy": 1, "desiredHealthy": 2, "disruptionsAllowed": 0}, False, False),
        (None, {"currentHealthy": 1, "desiredHealthy": 2, "disruptionsAllowed": 1}, True, True),
        # desiredHealthy 0 falls through to the disruptionsAllowed check.
        (None, {"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0}, False, False),
        # AlwaysAllow: unready pods are always evictable and consume nothing.
        ("AlwaysAllow", {"currentHealthy": 0, "desiredHealthy": 2, "disruptionsAllowed": 0}, True, False),
    ],
)
def test_unhealthy_pod_eviction_policy(
    policy: str | None, status: dict[str, Any], allowed: bool, decrement: bool
) -> None:
    budget = _ready_budget(**status)
    if policy:
        budget["spec"]["unhealthyPodEvictionPolicy"] = policy
    decision = eviction_decision(pod("a", ready=False), [budget])
    assert decision.allowed is allowed
    assert decision.decrement is decrement
    if allowed and not decrement:
        assert decision.require_resource_version
    if not allowed:
        assert decision.code == 429


def test_ready_pod_is_not_helped_by_always_allow() -> None:
    budget = _ready_budget(disruptionsAllowed=0)
    budget["spec"]["unhealthyPodEvictionPolicy"] = "AlwaysAllow"
    assert eviction_decision(pod("a"), [budget]).code == 429
