"""``--concurrent-syncs`` across the fleet: at most that many reconciles of one kind run at once,
whatever the number of worker pods.

Upstream each controller process starts ``ConcurrentNodeSyncs`` workers per queue. Here workers are
processes in any number of pods, so the cap is a Redis semaphore per kind: a sorted set of the
deliveries holding a slot, scored by when they took it. A holder killed mid-reconcile cannot give
its slot back; its entry ages out after ``--reconcile-lock-ttl`` (the same bound as the key's own
lock), so a crash costs capacity for at most that long and never blocks a kind for good.
"""

from __future__ import annotations

import time

import redis

from mcm_tasks.queue.scripts import LuaScript
from mcm_tasks.settings import Settings

#: a delivery that found every slot taken comes back after this (not an error: no backoff)
SLOT_RETRY = 0.05

_ACQUIRE = LuaScript(
    """
local now = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('ZADD', KEYS[1], now, ARGV[1])
return 1
"""
)


def slots_key(kind: str, settings: Settings) -> str:
    return f"{settings.key_prefix}:syncs:{kind}"


def acquire(
    client: redis.Redis, kind: str, holder: str, settings: Settings, now: float | None = None
) -> bool:
    """Take one of the kind's ``concurrent_syncs`` slots for this delivery, or say there is none."""
    stamp = time.time() if now is None else now
    args = [holder, repr(stamp), repr(settings.reconcile_lock_ttl), settings.concurrent_syncs]
    return bool(_ACQUIRE(client, [slots_key(kind, settings)], args))


def release(client: redis.Redis, kind: str, holder: str, settings: Settings) -> None:
    client.zrem(slots_key(kind, settings), holder)


def holders(client: redis.Redis, kind: str, settings: Settings) -> int:
    """Deliveries holding a slot now (the admin CLI and tests)."""
    return int(client.zcard(slots_key(kind, settings)))
