"""The adaptive creation timeout's decisions (pure, ``controllers/common/creation_timeout.py``) and
the timers' rechecks at their deadline (MCM #790) from the machine's creation (MCM #1009)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mcm_tasks.api import Machine
from mcm_tasks.controllers.common.creation_timeout import after_join, after_join_timeout, ceiling, step
from mcm_tasks.controllers.machine.health import decide_health, declared_creation_timeout
from mcm_tasks.settings import load_settings

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("declared", "configured", "expected"),
    [(20.0, 0.0, 40.0), (20.0, 30.0, 30.0), (20.0, 10.0, 20.0), (1200.0, 0.0, 2400.0)],
)
def test_ceiling(declared: float, configured: float, expected: float) -> None:
    assert ceiling(declared, configured) == expected


@pytest.mark.parametrize(
    ("machine_timeout", "current", "expected"),
    [
        (20.0, 20.0, 25.0),  # first timeout: one step (a quarter of the declared)
        (25.0, 25.0, 30.0),
        (35.0, 35.0, 40.0),
        (40.0, 40.0, None),  # at the ceiling
        (38.0, 38.0, 40.0),  # bounded by it
        (20.0, 25.0, None),  # another machine of the same generation already raised it
        (20.0, 30.0, None),
    ],
)
def test_after_join_timeout(machine_timeout: float, current: float, expected: float | None) -> None:
    assert after_join_timeout(machine_timeout, current, 20.0, 40.0) == expected


@pytest.mark.parametrize(
    ("join", "machine_timeout", "current", "expected"),
    [
        (25.0, 30.0, 30.0, None),  # joins just under the raised value: no swinging back
        (19.0, 30.0, 30.0, 25.0),  # fast: one step down
        (15.0, 25.0, 25.0, 20.0),
        (5.0, 20.0, 20.0, None),  # never below the declared value
        (5.0, 30.0, 25.0, None),  # already lowered by another machine
        (20.0, 30.0, 30.0, 25.0),  # exactly a step to spare
    ],
)
def test_after_join(join: float, machine_timeout: float, current: float, expected: float | None) -> None:
    assert after_join(join, machine_timeout, current, 20.0) == expected


def test_a_provider_joining_in_25s_against_20s_settles_and_stays() -> None:
    """Joins at 25 s (26 s with the controller's own delays): timeouts raise 20 → 25 → 30 s; the
    joins then never lower it again."""
    declared, maximum, current, join = 20.0, 40.0, 20.0, 26.0
    for _ in range(5):
        if current < join:  # the generation created with ``current`` times out
            new = after_join_timeout(current, current, declared, maximum)
        else:
            new = after_join(join, current, current, declared)
        current = new if new is not None else current
    assert current == 30.0
    assert step(declared) == 5.0


def machine(phase: str, *, age: float, since: float | None = None, **spec: object) -> Machine:
    status: dict[str, object] = {"currentStatus": {"phase": phase}}
    if since is not None:
        status["currentStatus"] = {
            "phase": phase,
            "lastUpdateTime": (NOW - timedelta(seconds=since)).isoformat(),
        }
    return Machine.model_validate(
        {
            "metadata": {"name": "m", "creationTimestamp": (NOW - timedelta(seconds=age)).isoformat()},
            "spec": spec,
            "status": status,
        }
    )


@pytest.mark.parametrize(
    ("m", "recheck"),
    [
        (machine("Pending", age=1190.0), 10.05),  # due at the deadline, not a period later
        (machine("Pending", age=100.0), 60.0),  # far from it: the recheck period
        (machine("Pending", age=100.0, creationTimeout="2m"), 20.05),
        # the creation timer runs from the creation, however recent the last status update
        (machine("Pending", age=1190.0, since=1.0), 10.05),
        (machine("Unknown", age=5000.0, since=590.0), 10.05),
    ],
)
def test_a_timer_is_rechecked_at_its_deadline(m: Machine, recheck: float) -> None:
    settings = load_settings({"machine_creation_timeout": "20m", "machine_health_timeout": "10m"})
    node = None if m.status.current_status.phase == "Pending" else {"status": {"conditions": []}}
    decision = decide_health(m, node, NOW, settings)
    assert decision.status is None
    assert decision.recheck_after == pytest.approx(recheck)


def test_the_declared_timeout_is_the_machines_or_the_flag() -> None:
    settings = load_settings({"machine_creation_timeout": "20m"})
    assert declared_creation_timeout(machine("Pending", age=0), settings) == 1200.0
    assert declared_creation_timeout(machine("Pending", age=0, creationTimeout="5m"), settings) == 300.0
