"""Reconciler registration and how workers find reconciler modules."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from mcm_tasks.queue import registry


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    registry.unregister_all()
    yield
    registry.unregister_all()


def test_register_and_look_up() -> None:
    def fn(key: str) -> None:
        return None

    registry.register_reconciler("machine", fn)
    registry.load_reconciler_modules([])
    assert registry.get_reconciler("machine") is fn
    assert registry.get_reconciler("node") is None


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown queue kind"):
        registry.register_reconciler("pods", lambda key: None)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, list(registry.DEFAULT_MODULES)),
        ("", []),
        ("a.b, c.d:install ,", ["a.b", "c.d:install"]),
    ],
)
def test_module_specs_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: list[str]
) -> None:
    if value is None:
        monkeypatch.delenv(registry.ENV, raising=False)
    else:
        monkeypatch.setenv(registry.ENV, value)
    assert registry.module_specs() == expected


def test_module_function_specs_are_called(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("fake_reconcilers")
    module.install = lambda: registry.register_reconciler("secret", lambda key: None)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_reconcilers", module)
    monkeypatch.setenv(registry.ENV, "fake_reconcilers:install")
    assert registry.get_reconciler("secret") is not None
    assert registry.registered_kinds() == ["secret"]


def test_missing_default_module_only_warns_but_a_named_one_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "DEFAULT_MODULES", ("no_such_module_for_mcm",))
    assert registry.load_reconciler_modules(["no_such_module_for_mcm"]) == []
    with pytest.raises(ModuleNotFoundError):
        registry.load_reconciler_modules(["another_missing_module_for_mcm"])
