"""``mcm_condition_seconds`` (``why_metrics``): per (kind, type, reason), the longest hold of any object."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mcm_tasks.api import NodeCondition
from mcm_tasks.why_metrics import condition_metric, condition_seconds

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def cond(type_: str, reason: str, seconds: float | None) -> NodeCondition:
    since = None if seconds is None else NOW - timedelta(seconds=seconds)
    return NodeCondition(type=type_, status="True", reason=reason, last_transition_time=since)


def test_the_longest_hold_per_kind_type_and_reason() -> None:
    found = condition_seconds(
        [
            ("machine", [cond("Creating", "WaitingForNode", 40), cond("Ready", "KubeletReady", 5)]),
            ("machine", [cond("Creating", "WaitingForNode", 90)]),
            ("machine", [cond("Creating", "CreatingVM", None)]),
            ("machineset", [cond("ScalingUp", "ScalingUp", 10)]),
        ],
        NOW,
    )
    assert found == {
        ("machine", "Creating", "WaitingForNode"): 90.0,
        ("machine", "Ready", "KubeletReady"): 5.0,
        ("machine", "Creating", "CreatingVM"): 0.0,
        ("machineset", "ScalingUp", "ScalingUp"): 10.0,
    }
    family = condition_metric(found)
    assert family.name == "mcm_condition_seconds"
    sample = next(s for s in family.samples if s.labels["reason"] == "WaitingForNode")
    assert sample.labels == {"kind": "machine", "type": "Creating", "reason": "WaitingForNode"}
    assert sample.value == 90.0
