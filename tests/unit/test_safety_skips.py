"""The fleet-wide safety jobs skip what they cannot read or judge and go on with the rest (issue 13,
item 6): the overshooting job leaves out a MachineSet that does not parse (a Warning Event on it) or
fails validation (negative replicas mean nothing, so they must not freeze it) and still judges the
sets beside it; the API-server check's unfreeze resets the readable Unknown machines around an
unreadable one. Reads and writes are replaced here; the integration tests run them for real."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_sandbox.testing import fixtures as fx
from mcm_sandbox.testing.hostile import nested
from mcm_tasks.api import Machine, MachineSet
from mcm_tasks.controllers import problems_io
from mcm_tasks.controllers.safety import APISERVER, OVERSHOOTING, apiserver_io, overshooting_io, reads_io
from mcm_tasks.controllers.safety.overshooting import FreezeChange, machines_per_owner
from mcm_tasks.controllers.safety.scope import SafetyScope
from mcm_tasks.kube.events import ObjectRef

Warned = list[tuple[str, str]]
LABELS = {"app": "w"}


@pytest.fixture
def warned(monkeypatch: pytest.MonkeyPatch) -> Warned:
    """Warning Events as (object name, reason), instead of writing them."""
    seen: Warned = []

    def record(scope: Any, obj: Any, reason: str, message: str) -> None:
        seen.append((obj.name if isinstance(obj, ObjectRef) else obj.metadata.name, reason))

    monkeypatch.setattr(problems_io, "warn", record)
    return seen


def valid_set(name: str, replicas: int = 1) -> dict[str, Any]:
    obj = fx.machine_set(name, selector=LABELS, replicas=replicas)
    obj["spec"]["template"] = {
        "metadata": {"labels": LABELS},
        "spec": {"class": {"kind": "MachineClass", "name": "cls"}},
    }
    return obj


def unreadable_set(name: str) -> dict[str, Any]:
    obj = valid_set(name, replicas=1)
    obj["spec"]["template"]["spec"]["nodeTemplate"] = {"spec": nested(110)}
    return obj


def owned(set_name: str, n: int) -> list[Machine]:
    return [Machine.model_validate(fx.machine(f"{set_name}-{i}", machine_set=set_name)) for i in range(n)]


def run_overshooting(
    monkeypatch: pytest.MonkeyPatch, sets: list[dict[str, Any]], machines: list[Machine]
) -> dict[str, FreezeChange]:
    """One pass over ``sets`` (raw, parsed as ``reads`` does); the change applied per set name."""
    applied: dict[str, FreezeChange] = {}

    def apply(scope: Any, api: Any, res: Any, obj: Any, decision: Any, errors: Any) -> None:
        applied[obj.metadata.name] = decision.change

    monkeypatch.setattr(
        reads_io, "machine_sets", lambda scope: problems_io.parse_each(scope, MachineSet, sets)
    )
    monkeypatch.setattr(reads_io, "machine_deployments", lambda scope: [])
    monkeypatch.setattr(reads_io, "machines_per_owner", lambda scope, uids: machines_per_owner(machines))
    monkeypatch.setattr(reads_io.context_io, "control_api", lambda: None)  # the scope's api
    monkeypatch.setattr(overshooting_io, "_apply", apply)
    overshooting_io.check_overshooting(SafetyScope.begin(OVERSHOOTING, OVERSHOOTING))
    return applied


# standalone sets, safety_up 2: higher = 2·replicas + 2; 10 machines overshoot every set below
@pytest.mark.parametrize(
    ("bad", "warning"),
    [
        pytest.param(valid_set("bad", replicas=-5), None, id="negative-replicas"),
        pytest.param(valid_set("bad", replicas=-(2**31)), None, id="int32-min-replicas"),
        pytest.param(unreadable_set("bad"), problems_io.UNREADABLE_REASON, id="unreadable"),
    ],
)
def test_overshooting_skips_a_set_it_cannot_judge_and_freezes_the_healthy_one_beside_it(
    monkeypatch: pytest.MonkeyPatch, warned: Warned, bad: dict[str, Any], warning: str | None
) -> None:
    machines = owned("bad", 10) + owned("good", 10)
    applied = run_overshooting(monkeypatch, [bad, valid_set("good", replicas=1)], machines)
    assert applied == {"good": FreezeChange.FREEZE}
    assert warned == ([("bad", warning)] if warning else [])


def test_overshooting_leaves_a_quiet_fleet_with_an_unreadable_set_alone(
    monkeypatch: pytest.MonkeyPatch, warned: Warned
) -> None:
    applied = run_overshooting(monkeypatch, [unreadable_set("bad"), valid_set("good", 3)], owned("good", 3))
    assert applied == {}
    assert warned == [("bad", problems_io.UNREADABLE_REASON)]


def unknown_machine(name: str, deep: bool = False) -> dict[str, Any]:
    obj = fx.machine(name, phase="Unknown")
    if deep:
        obj["spec"]["nodeTemplate"] = {"spec": nested(110)}
    return obj


class Keys:
    """Stands in for the Redis client where ``unfreeze`` only deletes the timer."""

    def delete(self, *keys: str) -> int:
        return len(keys)


def test_unfreeze_resets_the_readable_unknown_machines_around_an_unreadable_one(
    monkeypatch: pytest.MonkeyPatch, warned: Warned
) -> None:
    raws = [unknown_machine("a"), unknown_machine("bad", deep=True), unknown_machine("b")]
    reset: list[str] = []
    enqueued: list[str] = []
    frozen: list[bool] = []

    def reset_health_timeout(scope: Any, machine: Machine) -> bool:
        reset.append(machine.metadata.name or "")
        return True

    monkeypatch.setattr(reads_io.context_io, "control_api", lambda: None)
    monkeypatch.setattr(reads_io.ops, "list_", lambda api, res, namespace=None: {"items": raws})
    monkeypatch.setattr(apiserver_io, "reset_health_timeout", reset_health_timeout)
    monkeypatch.setattr(apiserver_io, "enqueue_after", lambda kind, key, delay: enqueued.append(key))
    monkeypatch.setattr(apiserver_io, "get_redis", Keys)
    monkeypatch.setattr(apiserver_io, "set_frozen", lambda value, client: frozen.append(value))

    apiserver_io.unfreeze(SafetyScope.begin(APISERVER, APISERVER))

    assert reset == ["a", "b"]
    assert frozen == [False], "the unreadable machine does not keep the controller frozen"
    assert warned == [("bad", problems_io.UNREADABLE_REASON)]
    assert all("bad" not in key for key in enqueued) and len(enqueued) >= 2
