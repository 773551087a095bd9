"""The one read of the mirror's sync state per pass is applied by registration, not remembered by each
reconciler: a reconciler registered through ``controllers.common.registration`` runs inside it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcm_tasks.cache import get_reader
from mcm_tasks.controllers.common.registration import register, scoped
from mcm_tasks.controllers.common.scope import PassScope
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
    with registry.around_pass():
        found("ns/a")
    found("ns/b")
    assert scopes == [1, 0]


def test_without_registered_scopes_a_pass_scope_is_empty() -> None:
    with registry.around_pass():
        assert get_reader()._scopes == 0


def test_scoped_reads_the_object_once_and_hands_the_phases_one_scope_per_pass() -> None:
    reads: list[str] = []
    seen: list[PassScope[str]] = []
    forgotten: list[str] = []

    def read(key: str) -> str | None:
        reads.append(key)
        return None if key == "ns/gone" else f"object {key}"

    def phases(scope: PassScope[str]) -> Requeue | None:
        assert scope.remember("n", lambda: len(seen)) == scope.remember("n", lambda: -1)
        seen.append(scope)
        return Requeue.short()

    reconcile = scoped(read, phases, PassScope.begin, gone=forgotten.append)
    assert reconcile("ns/a") == Requeue.short()
    assert reconcile("ns/a") == Requeue.short()
    assert reconcile("ns/gone") is None
    assert reads == ["ns/a", "ns/a", "ns/gone"]
    assert [(s.key, s.obj) for s in seen] == [("ns/a", "object ns/a")] * 2
    assert seen[0] is not seen[1] and seen[0].memo == {"n": 0} and seen[1].memo == {"n": 1}
    assert forgotten == ["ns/gone"], "a gone object reaches the controller's gone, not its phases"


def test_every_controller_reconciler_is_built_by_registration_on_its_scope() -> None:
    from mcm_tasks.controllers.machine import classes, deletion, secrets
    from mcm_tasks.controllers.machine import reconcile as machine
    from mcm_tasks.controllers.machineset import reconcile as machineset
    from mcm_tasks.controllers.safety import register as safety

    built = {
        machine.reconcile_machine: machine.machine_pass,
        deletion.reconcile_termination: deletion.termination_pass,
        classes.reconcile_machine_class: classes.machine_class_pass,
        secrets.reconcile_secret: secrets.secret_pass,
        machineset.reconcile_machine_set: machineset.machine_set_pass,
        safety.reconcile_safety: safety.safety_pass,
    }
    for reconciler, phases in built.items():
        while reconciler is not phases and hasattr(reconciler, "__wrapped__"):
            reconciler = reconciler.__wrapped__
        assert reconciler is phases


def test_each_thread_has_its_own_pass_scope() -> None:
    """A threads-pool worker runs several passes at once: one pass's remembered sync state must
    end with that pass, not live on while another thread's pass keeps the scope open."""
    import threading

    mine = get_reader()
    assert get_reader() is mine
    seen: list[object] = []
    inside = threading.Event()
    leave = threading.Event()

    def other_pass() -> None:
        with registry.around_pass(), get_reader().remembering_synced():
            seen.append(get_reader())
            inside.set()
            leave.wait(5)

    register(Queue.MACHINE, lambda key: None)
    thread = threading.Thread(target=other_pass)
    thread.start()
    try:
        assert inside.wait(5)
        assert seen[0] is not mine
        assert mine._scopes == 0, "another thread's pass is not this thread's"
    finally:
        leave.set()
        thread.join(5)


def test_a_threads_listers_are_built_once_per_namespace_and_reader() -> None:
    """``get_listers`` hands a thread the same listers while its namespace and reader stay (a pass
    asks several times), and new ones over another reader (another thread's, or a test's mirror)
    or for another namespace (a seed's)."""
    import threading

    from mcm_tasks.cache import get_listers
    from mcm_tasks.settings import configure, get_settings, reset_settings

    url = get_settings().redis_url
    configure({"redis_url": url, "namespace": "shoot-a"})
    try:
        mine = get_listers()
        assert get_listers() is mine and mine.machines.reader is get_reader()
        other: list[object] = []
        thread = threading.Thread(target=lambda: other.append(get_listers()))
        thread.start()
        thread.join(5)
        assert other and other[0] is not mine
        configure({"redis_url": url, "namespace": "shoot-b"})
        theirs = get_listers()
        assert theirs is not mine and theirs.machines.namespace == "shoot-b"
    finally:
        reset_settings()
