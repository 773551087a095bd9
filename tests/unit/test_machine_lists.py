"""The machine lists of the class and node reconcilers (``machines_of_class``, ``machines_on_node``) go
through the one list reader, ``list_objects``, and treat a machine that does not parse the same on both
paths: left out of the list (as the listers leave it out of every mirror list), and answered by its own
reconcile with an ``Unreadable`` Warning Event. Reads are replaced here; the integration tests run them
against the sandbox."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mcm_sandbox.testing import fixtures as fx
from mcm_sandbox.testing.hostile import nested
from mcm_tasks.api.constants import NODE_LABEL_KEY
from mcm_tasks.controllers import problems
from mcm_tasks.controllers.common import context
from mcm_tasks.controllers.machine import secrets
from mcm_tasks.controllers.machine.reconcile import reconcile_machine
from mcm_tasks.kube.events import ObjectRef

Obj = dict[str, Any]


def unreadable(name: str, **kw: Any) -> Obj:
    obj = fx.machine(name, **kw)
    obj["spec"]["nodeTemplate"] = {"spec": nested(110)}
    return obj


RAWS = [
    fx.machine("a", cls="c", node="n"),
    unreadable("bad", cls="c", node="n"),
    fx.machine("b", cls="c", node="n"),
    fx.machine("other", cls="d", node="m"),
]


class Machines:
    """The machines' lister, as far as these lists read it: ``synced`` decides the path."""

    def __init__(self, synced: bool) -> None:
        self._synced = synced
        self.raw = self

    def synced(self) -> bool:
        return self._synced

    def of_class(self, name: str) -> list[Obj]:
        return [m for m in RAWS if m["spec"]["class"]["name"] == name]

    def on_node(self, node: str) -> list[Obj]:
        return [m for m in RAWS if m["metadata"]["labels"].get(NODE_LABEL_KEY) == node]


@pytest.fixture(params=[False, True], ids=["live", "mirror"])
def listed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The label selector of each live LIST (none on the mirror path)."""
    selectors: list[str | None] = []

    def list_(api: Any, res: Any, namespace: Any = None, **kw: Any) -> Obj:
        selectors.append(kw.get("label_selector"))
        selector = kw.get("label_selector")
        node = selector.partition("=")[2] if selector else None
        return {
            "items": [m for m in RAWS if node is None or m["metadata"]["labels"].get(NODE_LABEL_KEY) == node]
        }

    monkeypatch.setattr(context, "_listers", lambda: SimpleNamespace(machines=Machines(request.param)))
    monkeypatch.setattr(context, "control_api", lambda: None)
    monkeypatch.setattr(context.ops, "list_", list_)
    return selectors


def test_an_unreadable_machine_is_left_out_of_the_machines_of_a_class(listed: list[str | None]) -> None:
    assert [m.metadata.name for m in context.machines_of_class("c", fx.NS)] == ["a", "b"]


def test_an_unreadable_machine_is_left_out_of_the_machines_on_a_node(listed: list[str | None]) -> None:
    assert [m.metadata.name for m in context.machines_on_node("n")] == ["a", "b"]
    assert listed in ([], [f"{NODE_LABEL_KEY}=n"])


def test_the_unreadable_machine_is_answered_by_its_own_reconcile(monkeypatch: pytest.MonkeyPatch) -> None:
    warned: list[tuple[str, str]] = []

    def warn(obj: Any, reason: str, message: str) -> None:
        warned.append((obj.name if isinstance(obj, ObjectRef) else obj.metadata.name, reason))

    monkeypatch.setattr(problems, "warn", warn)
    monkeypatch.setattr(context, "mirror_has", lambda lister: False)
    monkeypatch.setattr(context, "control_api", lambda: None)
    monkeypatch.setattr(context.ops, "get", lambda api, res, name, namespace=None, **kw: RAWS[1])
    assert reconcile_machine(f"{fx.NS}/bad") is None
    assert warned == [("bad", problems.UNREADABLE_REASON)]


def test_an_unreadable_class_is_left_out_of_the_classes_referencing_a_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Secret reconcile's list (upstream ``findMachineClassForSecret``) follows the same policy on
    the live path."""
    bad = fx.machine_class("bad", secret="s")
    bad["nodeTemplate"] = {"spec": nested(110)}
    raws = [fx.machine_class("a", secret="s"), bad, fx.machine_class("other", secret="t")]
    monkeypatch.setattr(context, "mirror_has", lambda lister: False)
    monkeypatch.setattr(context, "control_api", lambda: None)
    monkeypatch.setattr(context.ops, "list_", lambda api, res, namespace=None, **kw: {"items": raws})
    assert [c.metadata.name for c in secrets.classes_referencing(f"{fx.NS}/s")] == ["a"]
