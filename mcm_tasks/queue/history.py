"""What happened to one key: its last runs, kept in Redis, bounded.

Each (kind, key) has a list ``<prefix>:q:<kind>:history:<key>``, newest first, of at most
``history_length`` runs; a run is written when it starts (so ``admin inspect`` can say "running on
W since T", and a run whose worker died stays visible as one that never ended) and completed when
it ends, each in the same round trip as the contract's BEGIN and END scripts. Every list expires
``HISTORY_TTL`` after its last run, so keys of deleted objects do not accumulate.

Entries hold names, times, the outcome in words (``policy.describe``) and the redacted error; never
task arguments beyond the key, never secret material.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Final

import orjson
import redis
from pydantic import BaseModel

from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.queue.scripts import LuaScript
from mcm_tasks.redisdb import get_redis, rkey
from mcm_tasks.settings import get_settings

#: a key's history outlives its last run by a week, then goes with it
HISTORY_TTL: Final = 7 * 24 * 3600

#: start a run: add it at the head, if the delivery holds the key's lock (BEGIN, pipelined just before,
#: let it run). ARGV: locks hash, key, message id, list, entry JSON, length, ttl
_START = LuaScript("""
local lock = redis.call('HGET', ARGV[1], ARGV[2])
if not lock or string.sub(lock, -#ARGV[3] - 1) ~= '|' .. ARGV[3] then return 0 end
redis.call('LPUSH', ARGV[4], ARGV[5])
redis.call('LTRIM', ARGV[4], 0, tonumber(ARGV[6]) - 1)
redis.call('EXPIRE', ARGV[4], tonumber(ARGV[7]))
return 1
""")

#: complete the run at the head of the list if it is this message's, else add it (its start was
#: lost, e.g. the history expired meanwhile); an empty entry drops it instead (a delivery that
#: handed its key back without running). ARGV: list, message id, entry JSON, length, ttl (the
#: list is an argument, as in the contract's scripts, so the call pipelines with them)
_FINISH = LuaScript("""
local list = ARGV[1]
local head = redis.call('LINDEX', list, 0)
-- entries begin {"id":"<message id>" (entry() writes the id first): no JSON decoding needed
local prefix = '{"id":"' .. ARGV[2] .. '"'
local mine = head and string.sub(head, 1, #prefix) == prefix
if ARGV[3] == '' then
  if mine then redis.call('LPOP', list) end
elseif mine then
  redis.call('LSET', list, 0, ARGV[3])  -- the start set the list's expiry
else
  redis.call('LPUSH', list, ARGV[3])
  redis.call('LTRIM', list, 0, tonumber(ARGV[4]) - 1)
  redis.call('EXPIRE', list, tonumber(ARGV[5]))
end
return 1
""")

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
    return rkey("q", kind, "history", key)


def worker_name(node: str | None = None) -> str:
    """The Celery node name (``mcm-12@host``) and the pool process that runs the reconcile."""
    return f"{node or _HOST}/{os.getpid()}"


def entry(message_id: str, start: float, worker: str, end: float | None = None, outcome: str = "",
          error: str = "") -> str:  # fmt: skip
    """A run as stored (``Run``'s JSON; built with orjson: this runs twice per reconcile). The id
    comes first: _FINISH recognises its run by that prefix."""
    return orjson.dumps(
        {"id": message_id, "start": start, "worker": worker, "end": end, "outcome": outcome, "error": error}
    ).decode()


Call = tuple[LuaScript, list[Any]]


def start_calls(kind: str, key: str, message_id: str, started: float, worker: str) -> list[Call]:
    """The history half of a run's start, to pipeline right after the contract's BEGIN (none when
    ``history_length`` is 0)."""
    s = get_settings()
    if not s.history_length:
        return []
    return [(_START, [queue_keys(kind, s).locks, key, message_id, history_key(kind, key),
                    entry(message_id, started, worker), s.history_length, HISTORY_TTL])]  # fmt: skip


def finish_calls(kind: str, key: str, message_id: str, done: str) -> list[Call]:
    """The history half of a run's end (``done``: its entry; "" drops the start), to pipeline with
    the contract's END script."""
    length = get_settings().history_length
    if not length:
        return []
    return [(_FINISH, [history_key(kind, key), message_id, done, length, HISTORY_TTL])]


def read_history(kind: str, key: str, client: redis.Redis | None = None) -> list[Run]:
    """Newest first."""
    raw = (client or get_redis()).lrange(history_key(kind, key), 0, -1)
    return [Run.model_validate(orjson.loads(item)) for item in raw]  # type: ignore[union-attr]
