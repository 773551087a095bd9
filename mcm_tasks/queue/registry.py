"""Which function reconciles which kind, and how a worker process finds them.

Controllers call ``register_reconciler(kind, fn)`` when their module is imported. A worker imports
the modules named in ``MCM_RECONCILER_MODULES`` (comma-separated; ``module`` is imported,
``module:function`` is imported and the function called, so one module can offer several
set-ups), by default ``mcm_tasks.controllers.reconcilers``. Tests and benchmarks point it at
``mcm_sandbox.testing.queue:install_recorder`` and friends.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any, Protocol

from mcm_tasks.kinds import QUEUES
from mcm_tasks.queue.policy import Requeue

log = logging.getLogger(__name__)

#: a reconciler: key → None (done, forget the backoff) or Requeue; raising means "failed"
Reconciler = Callable[[str], Requeue | None]
#: told that a key's reconcile failed: (key, reason, message); records a Warning Event on its object
#: and says whether it could (an Event not written is owed: reported again later in the streak)
FailureReporter = Callable[[str, str, str], bool]
#: told that a key's previous reconcile died with its worker, before the key runs again: drops or
#: re-checks what that reconcile promised (expectations)
RecoveryHook = Callable[[str], None]
#: entered around every reconcile pass a worker runs (the controllers' one read of the mirror's sync
#: state per pass); registered by whoever registers the reconcilers, so no reconciler has to remember it
AroundPass = Callable[[], AbstractContextManager[Any]]


class ReadAhead(Protocol):
    """What a kind's pass reads first, read by the contract's BEGIN in the round trip that starts
    the run (a machine pass's own machine and the mirror's synced kinds: one round trip of the few a
    pass makes, on every creation and every idle recheck). Only reads: a pass that finds nothing
    seeded reads for itself, as without it."""

    def plan(self, key: str) -> tuple[Sequence[str], Sequence[str]]:
        """(KEYS, fields): the field names of the hash ``KEYS[0]`` are read, and of each further
        hash ``KEYS[i]`` the field ``fields[i - 1]``."""

    def seed(self, key: str, found: Sequence[Any]) -> None:
        """Hand the pass what BEGIN read (in ``plan``'s order; None: no such field), inside
        ``around_pass`` and before the reconciler runs."""


ENV = "MCM_RECONCILER_MODULES"
DEFAULT_MODULES = ("mcm_tasks.controllers.reconcilers",)

_registry: dict[str, Reconciler] = {}
_reporters: dict[str, FailureReporter] = {}
_recovery_hooks: dict[str, list[RecoveryHook]] = {}
_around_pass: list[AroundPass] = []
_read_ahead: dict[str, ReadAhead] = {}
_loaded = False
_load_lock = threading.Lock()


def register_reconciler(kind: str, fn: Reconciler) -> Reconciler:
    _check_kind(kind)
    _registry[kind] = fn
    return fn


def register_failure_reporter(kind: str, fn: FailureReporter) -> FailureReporter:
    """Who puts the Warning Event of a failing key of ``kind`` on its object (the first failure of a
    streak and every change of error; the queue decides when, the reporter only writes)."""
    _check_kind(kind)
    _reporters[kind] = fn
    return fn


def register_recovery_hook(kind: str, fn: RecoveryHook) -> RecoveryHook:
    """Run ``fn(key)`` before a key of ``kind`` whose previous reconcile died runs again."""
    _check_kind(kind)
    hooks = _recovery_hooks.setdefault(kind, [])
    if fn not in hooks:
        hooks.append(fn)
    return fn


def register_read_ahead(kind: str, ahead: ReadAhead) -> ReadAhead:
    """BEGIN reads what ``ahead`` plans before each pass of ``kind`` (``ReadAhead``)."""
    _check_kind(kind)
    _read_ahead[kind] = ahead
    return ahead


def read_ahead(kind: str) -> ReadAhead | None:
    if not _loaded:
        load_reconciler_modules()
    return _read_ahead.get(kind)


def register_around_pass(around: AroundPass) -> AroundPass:
    """Enter ``around()`` around every reconcile pass (once, however often it is registered)."""
    if around not in _around_pass:
        _around_pass.append(around)
    return around


@contextmanager
def around_pass() -> Iterator[None]:
    """Every registered ``AroundPass``, entered in registration order."""
    with ExitStack() as stack:
        for around in list(_around_pass):
            stack.enter_context(around())
        yield


def failure_reporter(kind: str) -> FailureReporter | None:
    if not _loaded:
        load_reconciler_modules()
    return _reporters.get(kind)


def recovery_hooks(kind: str) -> list[RecoveryHook]:
    if not _loaded:
        load_reconciler_modules()
    return list(_recovery_hooks.get(kind, ()))


def _check_kind(kind: str) -> None:
    if kind not in QUEUES:
        raise ValueError(f"unknown queue kind {kind!r}; known: {', '.join(QUEUES)}")


def unregister_all() -> None:
    """Tests: start from an empty registry (and load modules again on next use)."""
    global _loaded
    _registry.clear()
    _reporters.clear()
    _recovery_hooks.clear()
    _around_pass.clear()
    _read_ahead.clear()
    _loaded = False


def registered_kinds() -> list[str]:
    return sorted(_registry)


def module_specs(value: str | None = None) -> list[str]:
    raw = os.environ.get(ENV) if value is None else value
    if raw is None:
        return list(DEFAULT_MODULES)
    return [part.strip() for part in raw.split(",") if part.strip()]


def load_reconciler_modules(specs: Iterable[str] | None = None) -> list[str]:
    """Import the reconciler modules (idempotent per process); the specs that loaded."""
    global _loaded
    with _load_lock:
        wanted = list(specs) if specs is not None else module_specs()
        done = []
        for spec in wanted:
            module_name, _, func = spec.partition(":")
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as err:
                if spec in DEFAULT_MODULES and err.name == module_name:
                    log.warning("no reconcilers registered: %s does not exist yet", module_name)
                    continue
                raise
            if func:
                getattr(module, func)()
            done.append(spec)
        _loaded = True
        return done


def get_reconciler(kind: str) -> Reconciler | None:
    """Upstream: ``reconcileClusterMachineKey``, ``reconcileClusterMachineSetKey``."""
    if not _loaded:
        load_reconciler_modules()
    return _registry.get(kind)
