"""Log lines that say which object they are about, as text or JSON (``--log-format``).

A reconcile runs inside ``log_context(kind, key)``; a filter on every handler stamps each record
made meanwhile (by any logger: a controller, a driver, the Kubernetes client) with ``kind`` and
``key``, and in seed mode with the ``namespace`` whose work it is (a Node's or a safety job's key
does not name it). Text lines that do not already name the key get ``<kind> <key>: `` in front; JSON lines
carry both as fields, so ``jq 'select(.key == "shoot--x/m-1")'`` finds everything about one object.

Every process sets its handlers up through ``setup_logging`` (the informer, beat) or Celery's
logging signals (the worker, whose pool processes inherit the handlers).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from mcm_tasks.tenancy import current_namespace

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_current: ContextVar[tuple[str, str] | None] = ContextVar("mcm_reconcile", default=None)


@contextlib.contextmanager
def log_context(kind: str, key: str) -> Iterator[None]:
    """Records logged inside name this (kind, key)."""
    token = _current.set((kind, key))
    try:
        yield
    finally:
        _current.reset(token)


def enter(kind: str, key: str) -> None:
    """``log_context`` for hooks that cannot wrap a block (Celery's task_prerun / task_postrun):
    Celery's own "succeeded in" line then names the key too."""
    _current.set((kind, key))


def leave() -> None:
    _current.set(None)


class ContextFilter(logging.Filter):
    """Stamps records with the reconcile they belong to (``kind``/``key``, empty outside one); for
    text output, a message that does not name the key gets ``<kind> <key>: `` in front."""

    def __init__(self, prefix: bool = True) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        if hasattr(record, "kind"):  # stamped by another handler's filter already
            return True
        kind, key = _current.get() or ("", "")
        record.kind, record.key = kind, key
        namespace = current_namespace() or ""  # seed mode: whose work this is
        record.namespace = namespace  # type: ignore[attr-defined]
        if self.prefix and key:
            message = record.getMessage()
            shown = f"{key} ({namespace})" if namespace and "/" not in key else key
            if key not in message:
                record.msg, record.args = f"{kind} {shown}: {message}", None
        elif self.prefix and namespace:  # a seed-mode tenant's informer, keeper, beat
            record.msg, record.args = f"[{namespace}] {record.getMessage()}", None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, kind, key (and exc, task fields)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in ("kind", "key", "namespace", "task_name", "task_id"):
            value = getattr(record, name, "")
            if value and value != "???":
                entry[name] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def install(logger: logging.Logger, log_format: str) -> None:
    """Give every handler of ``logger`` the context filter, and in JSON mode the JSON format (in
    text mode the handler keeps its format, Celery's included)."""
    for handler in logger.handlers:
        for old in [f for f in handler.filters if isinstance(f, ContextFilter)]:
            handler.removeFilter(old)
        handler.addFilter(ContextFilter(prefix=log_format != "json"))
        if log_format == "json":
            handler.setFormatter(JsonFormatter())
    if log_format == "json":
        logging.captureWarnings(True)  # Python warnings as JSON lines too, not raw text on stderr


def setup_logging(level: str, log_format: str) -> None:
    """For processes that own their logging (informer, beat): one stderr handler on the root."""
    logging.basicConfig(level=level.upper(), format=TEXT_FORMAT, force=True)
    install(logging.getLogger(), log_format)
