"""The one read of the mirror's sync state per pass is applied by registration, not remembered by each
reconciler: a reconciler registered through ``controllers.common.registration`` runs inside it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcm_tasks.cache import get_reader
from mcm_tasks.controllers.common.registration import register
from mcm_tasks.kinds import Queue
from mcm_tasks.queue import Requeue, registry


@pytest.fixture(autouse=True)
def empty_registry() -> Iterator[None]:
    registry.unregister_all()
    registry.load_reconciler_modules([])  # nothing else registers behind the test's back
    yield
    registry.unregister_all()


def test_a_registered_reconciler_runs_in_the_mirror_pass_scope() -> None:
    scopes: list[int] = []

    def reconcile(key: str) -> Requeue | None:
        scopes.append(get_reader()._scopes)
        return None

    register(Queue.MACHINE, reconcile)
    register(Queue.MACHINE_SET, reconcile)
    found = registry.get_reconciler(Queue.MACHINE)
    assert found is reconcile  # the reconciler itself, undecorated
    with registry.pass_scope():
        found("ns/a")
    found("ns/b")
    assert scopes == [1, 0]


def test_without_registered_scopes_a_pass_scope_is_empty() -> None:
    with registry.pass_scope():
        assert get_reader()._scopes == 0
