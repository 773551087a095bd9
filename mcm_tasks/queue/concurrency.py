"""``--concurrent-syncs`` across the fleet: at most that many reconciles of one kind run at once,
whatever the number of worker pods.

Upstream each controller process starts ``ConcurrentNodeSyncs`` workers per queue. Here workers are
processes in any number of pods, so the cap is a Redis semaphore per kind: a sorted set of the
deliveries holding a slot, scored by when they took it. A holder killed mid-reconcile cannot give
its slot back; its entry ages out after ``--reconcile-lock-ttl`` (the same bound as the key's own
lock), so a crash costs capacity for at most that long and never blocks a kind for good.

A delivery takes its slot in the same round trip as the contract's BEGIN and gives it back in
the same round trip as END (``acquire_call``/``release_call``, pipelined after them), so the cap
costs no round trip of its own.
"""

from __future__ import annotations

import time

import redis

from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.queue.scripts import LuaScript
from mcm_tasks.settings import Settings

#: a delivery that found every slot taken comes back after this (not an error: no backoff)
SLOT_RETRY = 0.05

_TAKE = """
local now = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', ARGV[5], '-inf', now - tonumber(ARGV[3]))
if redis.call('ZCARD', ARGV[5]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('ZADD', ARGV[5], now, ARGV[1])
return 1
"""

#: ARGV: holder, now, ttl, cap, slots
_ACQUIRE = LuaScript(_TAKE)

#: the same, only for a delivery BEGIN let run (it holds the key's lock, whose value ends in
#: ``|<message id>``; -1 otherwise). ARGV: holder, now, ttl, cap, slots, locks hash, key
_ACQUIRE_IF_RUNNING = LuaScript(
    """
local lock = redis.call('HGET', ARGV[6], ARGV[7])
if not lock or string.sub(lock, -#ARGV[1] - 1) ~= '|' .. ARGV[1] then return -1 end
"""
    + _TAKE
)

#: ARGV: slots, holder
_RELEASE = LuaScript("redis.call('ZREM', ARGV[1], ARGV[2]) return 1")

Call = tuple[LuaScript, list[object]]


def slots_key(kind: str, settings: Settings) -> str:
    return f"{settings.key_prefix}:syncs:{kind}"


def _take_args(kind: str, holder: str, settings: Settings, now: float | None) -> list[object]:
    stamp = time.time() if now is None else now
    return [holder, repr(stamp), repr(settings.reconcile_lock_ttl), settings.concurrent_syncs,
            slots_key(kind, settings)]  # fmt: skip


def acquire(
    client: redis.Redis, kind: str, holder: str, settings: Settings, now: float | None = None
) -> bool:
    """Take one of the kind's ``concurrent_syncs`` slots for this delivery, or say there is none."""
    return bool(_ACQUIRE(client, [], _take_args(kind, holder, settings, now)))


def acquire_call(kind: str, key: str, holder: str, settings: Settings) -> Call:
    """``acquire`` as a call to pipeline right after BEGIN: it takes a slot only if BEGIN let this
    delivery run. Its reply: 1 taken, 0 every slot busy, -1 not running."""
    args = [*_take_args(kind, holder, settings, None), queue_keys(kind, settings).locks, key]
    return (_ACQUIRE_IF_RUNNING, args)


def release(client: redis.Redis, kind: str, holder: str, settings: Settings) -> None:
    client.zrem(slots_key(kind, settings), holder)


def release_call(kind: str, holder: str, settings: Settings) -> Call:
    """``release`` as a call to pipeline with END."""
    return (_RELEASE, [slots_key(kind, settings), holder])


def holders(client: redis.Redis, kind: str, settings: Settings) -> int:
    """Deliveries holding a slot now (the admin CLI and tests)."""
    return int(client.zcard(slots_key(kind, settings)))
