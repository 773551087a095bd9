"""Controllers and fleet-wide jobs answer bad objects and go on (issue 13, item 6): an unreadable
object ends its pass with a Warning Event instead of an exception loop, the orphan-VM job skips a
class it cannot handle and collects the others, a class that cannot make machines says why."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_sandbox.testing import fixtures as fx
from mcm_tasks.api import MachineClass, MachineSet, now_utc
from mcm_tasks.cache.models import Unreadable, parse_object
from mcm_tasks.controllers import problems_io
from mcm_tasks.controllers.machine.classes import class_problems
from mcm_tasks.controllers.machineset import status
from mcm_tasks.controllers.safety import ORPHAN_VMS, orphans_io, reads_io
from mcm_tasks.controllers.safety.scope import SafetyScope
from mcm_tasks.kube.events import ObjectRef

Warned = list[tuple[str, str, str]]


@pytest.fixture
def warned(monkeypatch: pytest.MonkeyPatch) -> Warned:
    """Warning Events as (object name, reason, message), instead of writing them."""
    seen: Warned = []

    def record(scope: Any, obj: Any, reason: str, message: str) -> None:
        name = obj.name if isinstance(obj, ObjectRef) else obj.metadata.name
        seen.append((name, reason, message))

    monkeypatch.setattr(problems_io, "warn", record)
    monkeypatch.setattr(orphans_io, "warn", record)
    return seen


def unreadable_set(name: str = "bad") -> dict[str, Any]:
    obj = fx.machine_set(name)
    obj["spec"]["replicas"] = "many"
    return obj


def test_an_unreadable_object_ends_the_pass_with_an_event(warned: Warned) -> None:
    @problems_io.answers_unreadable
    def reconcile(key: str) -> str:
        parse_object(MachineSet, unreadable_set())
        return "never"

    assert reconcile("mcm/bad") is None
    assert [(name, reason) for name, reason, _ in warned] == [("bad", problems_io.UNREADABLE_REASON)]
    assert "spec.replicas" in warned[0][2] and "many" not in warned[0][2]


def test_other_errors_still_raise(warned: Warned) -> None:
    @problems_io.answers_unreadable
    def reconcile(key: str) -> None:
        raise RuntimeError("a bug, or an outage: backoff is right for these")

    with pytest.raises(RuntimeError):
        reconcile("mcm/x")
    assert warned == []


def test_parse_each_reports_and_skips_the_unreadable(warned: Warned) -> None:
    parsed = problems_io.parse_each(None, MachineSet, [fx.machine_set("good"), unreadable_set()])
    assert [s.metadata.name for s in parsed] == ["good"]
    assert [name for name, _, _ in warned] == ["bad"]


def classes(*names: str) -> list[MachineClass]:
    return [MachineClass.model_validate(fx.machine_class(n)) for n in names]


def test_the_orphan_job_skips_a_class_that_raises_and_collects_the_others(
    monkeypatch: pytest.MonkeyPatch, warned: Warned
) -> None:
    collected: list[str] = []

    def collect(
        scope: Any, machine_class: MachineClass, by_name: Any, report: orphans_io.OrphanReport
    ) -> None:
        if machine_class.metadata.name == "list-where-map":
            {"a": []}["a"].items()  # type: ignore[attr-defined]  # the upstream report's AttributeError
        collected.append(machine_class.metadata.name or "")

    monkeypatch.setattr(reads_io, "machines_for_orphans", lambda scope: [])
    monkeypatch.setattr(reads_io, "machine_classes", lambda scope: classes("a", "list-where-map", "b"))
    monkeypatch.setattr(orphans_io, "_collect_class", collect)
    monkeypatch.setattr(orphans_io, "sweep_nodes", lambda scope, machines, report: None)

    report = orphans_io.collect_orphans(SafetyScope.begin(ORPHAN_VMS, ORPHAN_VMS))

    assert collected == ["a", "b"]
    assert (report.classes, report.skipped_classes) == (3, 1)
    assert [(name, reason) for name, reason, _ in warned] == [
        ("list-where-map", orphans_io.CLASS_SKIPPED_REASON)
    ]
    assert "AttributeError" in warned[0][2]


def test_class_problems_say_what_keeps_a_class_from_making_machines() -> None:
    (cls,) = classes("c")
    assert class_problems(cls, []) == []
    cls.provider = "nimbus"
    found = class_problems(cls, ["mcm/gone"])
    assert found[0] == "secret mcm/gone not found"
    assert found[1].startswith("provider: 'nimbus' is not one of the installed providers")


def test_an_invalid_set_gets_a_replica_failure_condition_a_valid_pass_clears() -> None:
    machine_set = MachineSet.model_validate(fx.machine_set("s"))
    failed = status.with_failure(
        machine_set.status, status.ReplicaFailure("ValidationFailed", "x" * 5000), now_utc()
    )
    (condition,) = failed.conditions
    assert (condition.reason, len(condition.message)) == ("ValidationFailed", status.MAX_MESSAGE)
    cleared = status.calculate_status(machine_set.model_copy(update={"status": failed}), [], None, now_utc())
    assert cleared.conditions == []


def test_unreadable_carries_what_an_event_needs() -> None:
    with pytest.raises(Unreadable) as caught:
        parse_object(MachineSet, unreadable_set())
    ref = problems_io.ref_of(caught.value.identity, caught.value.kind)
    assert ref is not None and (ref.kind, ref.name, ref.namespace) == ("MachineSet", "bad", fx.NS)


def test_the_event_reference_of_a_deep_object_needs_no_dump() -> None:
    obj = fx.machine_class("deep")
    value: Any = "leaf"
    for _ in range(300):
        value = {"a": value}
    obj["providerSpec"] = value
    deep = MachineClass.model_validate(obj)
    with pytest.raises(Exception, match="depth"):
        ObjectRef.of(deep)  # what the recorder does with a model: dumps it whole
    ref = problems_io.identity(deep)
    assert (ref.kind, ref.name, ref.namespace) == ("MachineClass", "deep", fx.NS)
