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
from collections.abc import Callable, Iterable

from mcm_tasks.queue.policy import Requeue
from mcm_tasks.settings import QUEUES

log = logging.getLogger(__name__)

#: a reconciler: key → None (done, forget the backoff) or Requeue; raising means "failed"
Reconciler = Callable[[str], Requeue | None]

ENV = "MCM_RECONCILER_MODULES"
DEFAULT_MODULES = ("mcm_tasks.controllers.reconcilers",)

_registry: dict[str, Reconciler] = {}
_loaded = False
_load_lock = threading.Lock()


def register_reconciler(kind: str, fn: Reconciler) -> Reconciler:
    if kind not in QUEUES:
        raise ValueError(f"unknown queue kind {kind!r}; known: {', '.join(QUEUES)}")
    _registry[kind] = fn
    return fn


def unregister_all() -> None:
    """Tests: start from an empty registry (and load modules again on next use)."""
    global _loaded
    _registry.clear()
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
    if not _loaded:
        load_reconciler_modules()
    return _registry.get(kind)
