"""``seen.Recent``: what a process remembers between a rollout's passes, and for how long."""

from __future__ import annotations

import pytest

from mcm_tasks.controllers.machinedeployment import seen


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(seen.time, "monotonic", clock)
    return clock


def test_a_fact_is_known_for_max_age_then_read_again(clock: Clock) -> None:
    memory: seen.Recent[str, str] = seen.Recent()
    memory.remember({"ns/m-1": "node-1"}, max_age=15)
    assert memory.fresh(["ns/m-1", "ns/m-2"], max_age=15) == {"ns/m-1": "node-1"}
    clock.now += 15
    assert memory.fresh(["ns/m-1"], max_age=15) == {"ns/m-1": "node-1"}
    clock.now += 0.1
    assert memory.fresh(["ns/m-1"], max_age=15) == {}


def test_remembering_again_renews_and_expired_facts_are_dropped(clock: Clock) -> None:
    memory: seen.Recent[str, int] = seen.Recent()
    memory.remember({"a": 1, "b": 2}, max_age=10)
    clock.now += 8
    memory.remember({"a": 3}, max_age=10)
    clock.now += 8
    assert memory.fresh(["a", "b"], max_age=10) == {"a": 3}
    memory.remember({}, max_age=10)  # past max_age since the last pruning: "b" is dropped
    assert memory._items.keys() == {"a"}


def test_forget_where(clock: Clock) -> None:
    memory: seen.Recent[tuple[str, str], bool] = seen.Recent()
    memory.remember({("uid-1", "n-1"): True, ("uid-2", "n-1"): True}, max_age=10)
    memory.forget_where(lambda key: key[0] == "uid-1")
    assert memory.fresh([("uid-1", "n-1"), ("uid-2", "n-1")], max_age=10) == {("uid-2", "n-1"): True}
