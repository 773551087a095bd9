"""Node-deletion storms' decisions (pure, ``controllers/machine/storm.py``) and the release target."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mcm_tasks.admin.holds import parse_target
from mcm_tasks.api import Machine
from mcm_tasks.api.constants import HELD_ANNOTATION, NODE_DELETION_RELEASED_ANNOTATION
from mcm_tasks.controllers.machine.storm import (
    HELD_CONDITION,
    NODE_DELETION_STORM,
    held_condition,
    hold_description,
    hold_message,
    is_held,
    is_released,
    storm_limit,
    without_held_condition,
)


@pytest.mark.parametrize(
    ("threshold", "machines", "limit"),
    [
        ("20%", 20, 4),  # the default on a 20-machine fleet
        ("20%", 100, 20),
        ("20%", 21, 5),  # rounded up
        ("20%", 5, 3),  # a percentage allows at least 3
        ("20%", 0, 3),
        ("10", 100, 10),  # a number as written
        ("1", 100, 1),
        ("", 100, None),  # off
        ("0", 100, None),
        ("0%", 100, None),
    ],
)
def test_storm_limit(threshold: str, machines: int, limit: int | None) -> None:
    assert storm_limit(threshold, machines) == limit


def machine(annotations: dict[str, str]) -> Machine:
    return Machine.model_validate({"metadata": {"name": "m", "annotations": annotations}})


@pytest.mark.parametrize(
    ("annotations", "held", "released"),
    [
        ({}, False, False),
        ({HELD_ANNOTATION: NODE_DELETION_STORM}, True, False),
        ({HELD_ANNOTATION: "SomethingElse"}, False, False),
        ({NODE_DELETION_RELEASED_ANNOTATION: "2026-11-29T00:00:00Z"}, False, True),
    ],
)
def test_held_and_released(annotations: dict[str, str], held: bool, released: bool) -> None:
    assert is_held(machine(annotations)) is held
    assert is_released(machine(annotations)) is released


def test_the_hold_explains_itself_and_its_way_out() -> None:
    message = hold_message("m-1", "n-1", 4, 4, 300.0, "pool")
    assert "Node n-1 was deleted during a node-deletion storm" in message
    assert "4 machines of pool already deleted" in message
    assert "threshold 4" in message
    assert "mcm-tasks admin release deployment/pool" in message
    now = datetime(2026, 11, 29, tzinfo=UTC)
    cond = held_condition(message, now)
    assert (cond.type, cond.status, cond.reason) == (HELD_CONDITION, "True", NODE_DELETION_STORM)
    held = Machine.model_validate(
        {"metadata": {"name": "m"}, "status": {"conditions": [cond.model_dump(by_alias=True, mode="json")]}}
    )
    assert hold_description(held) == message
    assert without_held_condition(held.status.conditions) == []


@pytest.mark.parametrize(
    ("target", "parsed"),
    [("deployment/pool", ("deployment", "pool")), ("machine/m-1", ("machine", "m-1"))],
)
def test_release_targets(target: str, parsed: tuple[str, str]) -> None:
    assert parse_target(target) == parsed


@pytest.mark.parametrize("target", ["pool", "deployment/", "set/pool", "deployment/ns/pool", "/pool"])
def test_a_bad_release_target_is_refused(target: str) -> None:
    with pytest.raises(ValueError, match="expected deployment/<name> or machine/<name>"):
        parse_target(target)
