"""What happened to one key: its last runs, kept in Redis, bounded.

Each (kind, key) has a list ``<prefix>:q:<kind>:history:<key>``, newest first, of at most
``history_length`` runs; a run is written when it starts (so ``admin inspect`` can say "running on
W since T", and a run whose worker died stays visible as one that never ended) and completed when
it ends, by the contract's BEGIN and END scripts themselves (scripts.py ``history_start``,
``history_finish``), so a run's history costs no command of its own. Every list expires
``HISTORY_TTL`` after its last run, so keys of deleted objects do not accumulate.

Entries hold names, times, the outcome in words (``policy.describe``) and the redacted error; never
task arguments beyond the key, never secret material.
"""

from __future__ import annotations

import os
import socket
from typing import Final

import orjson
import redis
from pydantic import BaseModel

from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.redisdb import get_redis

#: a key's history outlives its last run by a week, then goes with it
HISTORY_TTL: Final = 7 * 24 * 3600

_HOST = socket.gethostname()


class Run(BaseModel):
    """One reconcile of a key; ``end`` is None while it runs (or if its worker died)."""

    id: str
    start: float
    worker: str
    end: float | None = None
    outcome: str = ""
    error: str = ""

    @property
    def duration(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - self.start)


def history_key(kind: str, key: str) -> str:
    return queue_keys(kind).history + key


def worker_name(node: str | None = None) -> str:
    """The Celery node name (``mcm-12@host``) and the pool process that runs the reconcile."""
    return f"{node or _HOST}/{os.getpid()}"


def entry(message_id: str, start: float, worker: str, end: float | None = None, outcome: str = "",
          error: str = "") -> str:  # fmt: skip
    """A run as stored (``Run``'s JSON; built with orjson: this runs twice per reconcile). The id
    comes first: END's ``history_finish`` recognises its run by that prefix."""
    return orjson.dumps(
        {"id": message_id, "start": start, "worker": worker, "end": end, "outcome": outcome, "error": error}
    ).decode()


def read_history(kind: str, key: str, client: redis.Redis | None = None) -> list[Run]:
    """Newest first."""
    raw = (client or get_redis()).lrange(history_key(kind, key), 0, -1)
    return [Run.model_validate(orjson.loads(item)) for item in raw]  # type: ignore[union-attr]
