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
from mcm_tasks.api import Machine
from mcm_tasks.api.constants import NODE_LABEL_KEY
from mcm_tasks.cache.models import parse_object
from mcm_tasks.controllers import problems_io
from mcm_tasks.controllers.common import context_io
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
        #: keys of the machines parsed one by one
        self.parsed: list[str] = []

    def synced(self) -> bool:
        return self._synced

    def of_class(self, name: str) -> list[Obj]:
        return [m for m in RAWS if m["spec"]["class"]["name"] == name]

    def on_node(self, node: str) -> list[Obj]:
        return [m for m in RAWS if m["metadata"]["labels"].get(NODE_LABEL_KEY) == node]

    # the class's question (``class_in_use``): keys under the index, then machines one by one
    @property
    def shared(self) -> Machines:
        return self

    def keys_by_index(self, index: str, value: str) -> list[str]:
        return [f"{m['metadata']['namespace']}/{m['metadata']['name']}" for m in self.of_class(value)]

    def get_by_key(self, key: str) -> Any:
        self.parsed.append(key)
        raw = next(m for m in RAWS if f"{m['metadata']['namespace']}/{m['metadata']['name']}" == key)
        return parse_object(Machine, raw)


@pytest.fixture(params=[False, True], ids=["live", "mirror"])
def listed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The label selector of each live LIST (none on the mirror path)."""
    selectors: list[str | None] = []

    def list_(api: Any, res: Any, namespace: Any = None, **kw: Any) -> Obj:
        selectors.append(kw.get("label_selector"))
        selector = kw.get("label_selector")
        node = selector.partition("=")[2] if selector else None
        return {
            "items": [
                m
                for m in RAWS
                if (node is None or m["metadata"]["labels"].get(NODE_LABEL_KEY) == node)
                and namespace in (None, m["metadata"]["namespace"])
            ]
        }

    machines = Machines(request.param)
    monkeypatch.setattr(context_io, "_listers", lambda: SimpleNamespace(machines=machines))
    monkeypatch.setattr(context_io, "control_api", lambda: None)
    monkeypatch.setattr(context_io.ops, "list_", list_)
    return selectors


def test_an_unreadable_machine_is_left_out_of_the_machines_of_a_class(listed: list[str | None]) -> None:
    assert [m.metadata.name for m in context_io.machines_of_class(None, "c", fx.NS)] == ["a", "b"]


def test_a_class_is_in_use_only_by_a_machine_that_can_be_read(
    listed: list[str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``class_in_use`` answers as ``machines_of_class`` would, on either path."""
    bad_only = [unreadable("bad", cls="e", node="n")]
    assert context_io.class_in_use(None, "c", fx.NS)
    assert not context_io.class_in_use(None, "unused", fx.NS)
    assert not context_io.class_in_use(None, "c", "elsewhere")
    monkeypatch.setattr(__name__ + ".RAWS", [*RAWS, *bad_only])
    assert not context_io.class_in_use(None, "e", fx.NS)


def test_the_class_question_reads_one_machine_not_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """From the mirror, the first readable machine answers: the others are not read, let alone parsed
    (at a thousand machines of a class that was a thousand parses on every pass of the class)."""
    machines = Machines(True)
    monkeypatch.setattr(context_io, "_listers", lambda: SimpleNamespace(machines=machines))
    assert context_io.class_in_use(None, "c", fx.NS)
    assert machines.parsed == [f"{fx.NS}/a"]


def test_an_unreadable_machine_is_left_out_of_the_machines_on_a_node(listed: list[str | None]) -> None:
    assert [m.metadata.name for m in context_io.machines_on_node(None, "n")] == ["a", "b"]
    assert listed in ([], [f"{NODE_LABEL_KEY}=n"])


def test_the_unreadable_machine_is_answered_by_its_own_reconcile(monkeypatch: pytest.MonkeyPatch) -> None:
    warned: list[tuple[str, str]] = []

    def warn(scope: Any, obj: Any, reason: str, message: str) -> None:
        warned.append((obj.name if isinstance(obj, ObjectRef) else obj.metadata.name, reason))

    monkeypatch.setattr(problems_io, "warn", warn)
    monkeypatch.setattr(context_io, "mirror_has", lambda lister: False)
    monkeypatch.setattr(context_io, "control_api", lambda: None)
    monkeypatch.setattr(context_io.ops, "get", lambda api, res, name, namespace=None, **kw: RAWS[1])
    assert reconcile_machine(f"{fx.NS}/bad") is None
    assert warned == [("bad", problems_io.UNREADABLE_REASON)]


def test_an_unreadable_class_is_left_out_of_the_classes_referencing_a_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Secret reconcile's list (upstream ``findMachineClassForSecret``) follows the same policy on
    the live path."""
    bad = fx.machine_class("bad", secret="s")
    bad["nodeTemplate"] = {"spec": nested(110)}
    raws = [fx.machine_class("a", secret="s"), bad, fx.machine_class("other", secret="t")]
    monkeypatch.setattr(context_io, "mirror_has", lambda lister: False)
    monkeypatch.setattr(context_io, "control_api", lambda: None)
    monkeypatch.setattr(context_io.ops, "list_", lambda api, res, namespace=None, **kw: {"items": raws})
    assert [c.metadata.name for c in secrets.classes_referencing(None, f"{fx.NS}/s")] == ["a"]
