from __future__ import annotations

import pytest
from pydantic import ValidationError

from mcm_sandbox.faults import FaultRule, FaultSet


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("rule", "verb", "resource", "expected"),
    [
        (FaultRule(action="error"), "get", "pods", True),
        (FaultRule(action="error", verbs=("list", "watch")), "get", "pods", False),
        (FaultRule(action="error", verbs=("list", "watch")), "watch", "pods", True),
        (FaultRule(action="hang", resources=("machines",)), "update", "machines", True),
        (FaultRule(action="hang", resources=("machines",)), "update", "nodes", False),
        (FaultRule(action="hang", resources=("pods",)), "create", "pods/eviction", True),
        (FaultRule(action="hang", resources=("pods/status",)), "patch", "pods", False),
        (FaultRule(action="hang", resources=("pods/status",)), "patch", "pods/status", True),
        (FaultRule(action="cut-watches"), "watch", "nodes", True),
        (FaultRule(action="cut-watches"), "list", "nodes", False),
        (
            FaultRule(action="latency", latency_ms=50, verbs=("patch",), resources=("nodes",)),
            "patch",
            "nodes",
            True,
        ),
    ],
)
def test_rule_matching(rule: FaultRule, verb: str, resource: str, expected: bool) -> None:
    assert rule.applies_to(verb, resource) is expected


def test_rule_defaults_and_validation() -> None:
    rule = FaultRule(action="error")
    assert rule.status_code == 503 and rule.duration_seconds is None
    assert FaultRule.model_validate({"action": "error", "verbs": ["get"]}).verbs == ("get",)
    for bad in (
        {"action": "explode"},
        {"action": "error", "verbs": ["fetch"]},
        {"action": "error", "status_code": 200},
        {"action": "latency"},
        {"action": "hang", "duration_seconds": 0},
        {"action": "hang", "surprise": 1},
    ):
        with pytest.raises(ValidationError):
            FaultRule.model_validate(bad)


def test_first_active_rule_wins_and_rules_expire() -> None:
    clock = Clock()
    faults = FaultSet(clock)
    short = faults.add(FaultRule(action="error", status_code=500, duration_seconds=5))
    faults.add(FaultRule(action="latency", latency_ms=10))
    first = faults.match("get", "pods")
    assert first is not None and first.id == short and first.status_code == 500
    assert first.expires_at == 1005.0
    clock.now = 1005.0
    second = faults.match("get", "pods")
    assert second is not None and second.action == "latency"
    assert [r.action for r in faults.active()] == ["latency"]


def test_a_rule_with_times_answers_that_many_requests_then_is_gone() -> None:
    faults = FaultSet(Clock())
    faults.add(FaultRule(action="error", resources=("persistentvolumeclaims",), times=2))
    assert faults.match("get", "pods") is None  # not counted
    first = faults.match("get", "persistentvolumeclaims")
    assert first is not None and first.times == 2
    assert [r.times for r in faults.active()] == [1]
    assert faults.match("get", "persistentvolumeclaims") is not None
    assert faults.match("get", "persistentvolumeclaims") is None
    assert faults.active() == []


def test_explicit_now_overrides_clock() -> None:
    faults = FaultSet(Clock())
    faults.add(FaultRule(action="hang", duration_seconds=1), now=0.0)
    assert faults.match("get", "pods", now=0.5) is not None
    assert faults.match("get", "pods", now=1.0) is None


def test_remove_and_clear() -> None:
    faults = FaultSet(Clock())
    a = faults.add(FaultRule(action="hang", resources=("nodes",)))
    b = faults.add(FaultRule(action="error"))
    assert a != b
    assert faults.remove(a) and not faults.remove(a)
    assert [r.id for r in faults.active()] == [b]
    faults.clear()
    assert faults.active() == [] and faults.match("get", "nodes") is None


def test_cuts_watches() -> None:
    clock = Clock()
    faults = FaultSet(clock)
    assert not faults.cuts_watches("nodes")
    faults.add(FaultRule(action="error", verbs=("watch",)))
    assert not faults.cuts_watches("nodes")
    faults.add(FaultRule(action="cut-watches", resources=("nodes",), duration_seconds=2))
    assert faults.cuts_watches("nodes") and not faults.cuts_watches("pods")
    clock.now += 2
    assert not faults.cuts_watches("nodes")


def test_rules_serialise_for_the_admin_endpoint() -> None:
    faults = FaultSet(Clock())
    faults.add(FaultRule(action="error", verbs=("get",), duration_seconds=3))
    dumped = faults.active()[0].model_dump(mode="json")
    assert dumped["id"] == "fault-1" and dumped["expires_at"] == 1003.0 and dumped["verbs"] == ["get"]
    assert FaultRule.model_validate(dumped) == faults.active()[0]
