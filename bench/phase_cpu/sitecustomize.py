"""``--phase-cpu``: what a worker's own CPU is spent on, by part, measured inside the worker.

The benchmarks put this folder first on ``PYTHONPATH`` with ``MCM_BENCH_PHASE_CPU_DIR`` set; Python
imports this module at start-up in every process, and in a worker (``mcm_tasks.cli worker``) it
wraps a few functions of the product as their modules are imported, so the product holds no rig.
Each wrapped call adds its thread's CPU (``time.thread_time``: the thread's own, not the waits of a
busy host nor the other threads') to a counter by name; a daemon thread writes the counters to
``$MCM_BENCH_PHASE_CPU_DIR/<pid>.json`` twice a second, and the benchmark takes the difference over a
phase (``bench.common.PhaseCpu``). The parts nest (a phase holds its API requests and Redis calls):
each is a figure of its own, not a share of a sum.

- ``task``: a whole Celery task, from ``task_prerun`` to ``task_postrun`` (the pool thread's CPU);
  the worker's CPU outside every task (consumer loop, acks, events) is the process's less their sum;
- ``deliver:<queue>``: the queue contract and the reconcile (``processing.deliver``);
- ``phase:<scope>:<phase>``: one phase of a pass (``phases.run_phases``);
- ``api:<verb>``: one API request with its answer decoded (``kube.rest.request``);
- ``driver:<call>``: the local cloud's driver calls;
- ``redis:command``, ``redis:pipeline``: a Redis round trip (the queue's, the mirror's, the cloud's);
  with ``MCM_BENCH_PHASE_CPU_CALLERS=N``, by the N product functions nearest the call
  (``redis:command:<module.function><-<module.function>``);
- ``log:record``: one log record made and written (``Logger._log``).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

_DIR = os.environ.get("MCM_BENCH_PHASE_CPU_DIR", "")
#: ``MCM_BENCH_PHASE_CPU_CALLERS=N``: Redis round trips by the N nearest product functions that made them
_BY_CALLER = int(os.environ.get("MCM_BENCH_PHASE_CPU_CALLERS", "0") or 0)
OWN = ("mcm_tasks.", "providers.", "informers.", "celery.", "kombu.")
_counts: dict[str, list[float]] = {}
_lock = threading.Lock()
_clock = time.thread_time


def _add(name: str, cpu: float) -> None:
    with _lock:
        entry = _counts.get(name)
        if entry is None:
            _counts[name] = [1, cpu]
        else:
            entry[0] += 1
            entry[1] += cpu


def _timed(name: str | Callable[..., str], func: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = _clock()
        try:
            return func(*args, **kwargs)
        finally:
            cpu = _clock() - started  # before naming the call: a caller's name walks the stack
            _add(name if isinstance(name, str) else name(*args, **kwargs), cpu)

    wrapper.__wrapped__ = func  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(func, "__name__", "wrapped")
    wrapper.__qualname__ = getattr(func, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = func.__doc__
    return wrapper


def _run_phases(original: Callable[..., Any]) -> Callable[..., Any]:
    def run_phases(scope: Any, phases: Any) -> Any:
        kind = type(scope).__name__
        timed = [_timed(f"phase:{kind}:{getattr(p, '__name__', p)}", p) for p in phases]
        return original(scope, timed)

    return run_phases


def _patch_phases(module: ModuleType) -> None:
    module.run_phases = _run_phases(module.run_phases)  # type: ignore[attr-defined]


def _patch_processing(module: ModuleType) -> None:
    module.deliver = _timed(lambda kind, *a, **k: f"deliver:{kind}", module.deliver)  # type: ignore[attr-defined]


def _patch_rest(module: ModuleType) -> None:
    module.request = _timed(lambda api, method, *a, **k: f"api:{method}", module.request)  # type: ignore[attr-defined]


def _patch_driver(module: ModuleType) -> None:
    cls = getattr(module, "LocalDriver", None)
    if cls is None:
        return
    for name in ("create_machine", "get_machine_status", "delete_machine", "initialize_machine"):
        if hasattr(cls, name):
            setattr(cls, name, _timed(f"driver:{name}", getattr(cls, name)))


def _caller(*_: Any, **__: Any) -> str:
    """The product's frames nearest the call (``_BY_CALLER`` of them): ``module.function<-…``."""
    found: list[str] = []
    frame = sys._getframe(2)
    while frame is not None and len(found) < _BY_CALLER:
        name = frame.f_globals.get("__name__", "")
        if name.startswith(OWN) and not name.startswith("mcm_tasks.redisdb"):
            found.append(f"{name.rpartition('.')[2]}.{frame.f_code.co_name}")
        frame = frame.f_back  # type: ignore[assignment]
    return "<-".join(found) or "other"


def _patch_redis(module: ModuleType) -> None:
    command, execute = module.Redis.execute_command, module.Pipeline.execute
    if _BY_CALLER:
        module.Redis.execute_command = _timed(lambda *a, **k: "redis:command:" + _caller(), command)
        module.Pipeline.execute = _timed(lambda *a, **k: "redis:pipeline:" + _caller(), execute)
    else:
        module.Redis.execute_command = _timed("redis:command", command)
        module.Pipeline.execute = _timed("redis:pipeline", execute)


def _patch_celery_app(module: ModuleType) -> None:
    from celery import signals

    started: dict[int, float] = {}

    def prerun(**_: Any) -> None:
        started[threading.get_ident()] = _clock()

    def postrun(**_: Any) -> None:
        begun = started.pop(threading.get_ident(), None)
        if begun is not None:
            _add("task", _clock() - begun)

    signals.task_prerun.connect(prerun, weak=False)
    signals.task_postrun.connect(postrun, weak=False)


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "mcm_tasks.controllers.common.phases": _patch_phases,
    "mcm_tasks.queue.processing": _patch_processing,
    "mcm_tasks.kube.rest": _patch_rest,
    "providers.local.driver": _patch_driver,
    "redis.client": _patch_redis,
    "mcm_tasks.celery_app": _patch_celery_app,
}


class _Finder(MetaPathFinder):
    """Lets each module of ``PATCHES`` load as usual, then patches it before its importer sees it."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target)  # type: ignore[attr-defined]
            if spec is not None and spec.loader is not None:
                loader = spec.loader
                execute = loader.exec_module  # type: ignore[attr-defined]

                def exec_module(module: ModuleType, execute: Any = execute, patch: Any = patch) -> None:
                    execute(module)
                    patch(module)

                loader.exec_module = exec_module  # type: ignore[attr-defined,method-assign]
                return spec
        return None


def _logging() -> None:
    import logging

    logging.Logger._log = _timed("log:record", logging.Logger._log)  # type: ignore[method-assign]


def _dump() -> None:
    path = os.path.join(_DIR, f"{os.getpid()}.json")
    with _lock:
        data = {k: list(v) for k, v in _counts.items()}
    tmp = path + ".tmp"
    with open(tmp, "w") as out:
        json.dump(data, out)
    os.replace(tmp, path)


def _writer() -> None:
    while True:
        time.sleep(0.5)
        _dump()


def _is_worker() -> bool:
    argv = getattr(sys, "orig_argv", sys.argv)
    return "mcm_tasks.cli" in argv and "worker" in argv


def _start_writer() -> None:
    threading.Thread(target=_writer, name="phase-cpu", daemon=True).start()


def _forked() -> None:
    """A prefork pool's child: counts of its own, written by a writer of its own."""
    global _lock
    _lock = threading.Lock()
    _counts.clear()
    _start_writer()


if _DIR and _is_worker():
    sys.meta_path.insert(0, _Finder())
    _logging()
    _start_writer()
    os.register_at_fork(after_in_child=_forked)
    atexit.register(_dump)
