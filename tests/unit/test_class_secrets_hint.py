"""A machine pass reads its class's secrets in the round trip of the class (``reconcile._ready``),
by the secrets the class named when this worker last loaded it (``likely_class_secrets``). The hint
only adds keys to a prefetch: a class whose refs changed since is still read right."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mcm_sandbox.testing import fixtures as fx
from mcm_tasks import kinds
from mcm_tasks.api import MachineClass
from mcm_tasks.controllers.common import context_io
from mcm_tasks.settings import Settings

NS = fx.NS


class Secrets:
    """The secrets' lister as ``secret_exists`` reads it: synced, and a raw ``get``."""

    def __init__(self, names: set[str]) -> None:
        self.names, self.raw = names, self

    def synced(self) -> bool:
        return True

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return fx.secret(name) if name in self.names else None


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> Secrets:
    found = Secrets({"a", "b"})
    monkeypatch.setattr(context_io, "_listers", lambda: SimpleNamespace(secrets=found))
    monkeypatch.setattr(context_io, "_class_secrets", {})
    return found


def load(name: str, **refs: Any) -> context_io.ClassContext:
    machine_class = MachineClass.model_validate(fx.machine_class(name, **refs))
    return context_io.load_class_context(None, machine_class, Settings(namespace=NS))  # type: ignore[arg-type]


def test_a_class_never_loaded_here_adds_nothing(secrets: Secrets) -> None:
    assert context_io.likely_class_secrets("c", NS) == []


def test_a_loaded_class_names_its_secrets_for_the_next_prefetch(secrets: Secrets) -> None:
    load("c", secret="a", credentials="b")
    mirror = kinds.SECRET.mirror
    assert context_io.likely_class_secrets("c", NS) == [(mirror, f"{NS}/a"), (mirror, f"{NS}/b")]
    assert context_io.likely_class_secrets("other", NS) == []


def test_a_class_whose_refs_changed_is_read_by_its_new_refs(secrets: Secrets) -> None:
    load("c", secret="a")
    changed = load("c", secret="gone")
    assert changed.missing_secrets == [f"{NS}/gone"]
    assert context_io.likely_class_secrets("c", NS) == [(kinds.SECRET.mirror, f"{NS}/gone")]
