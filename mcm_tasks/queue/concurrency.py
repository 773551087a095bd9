"""``--concurrent-syncs`` across the fleet: at most that many reconciles of one kind run at once,
whatever the number of worker pods.

Upstream each controller process starts ``ConcurrentNodeSyncs`` workers per queue. Here workers are
processes in any number of pods, so the cap is a Redis semaphore per kind: a sorted set of the
deliveries holding a slot, scored by when they took it. A holder killed mid-reconcile cannot give
its slot back; its entry ages out after ``--reconcile-lock-ttl`` (the same bound as the key's own
lock; dropped by the first delivery that finds every slot taken, ``holders`` counts it until
then), so a crash costs capacity for at most that long and never blocks a kind for good.

A delivery takes its slot inside the contract's BEGIN script and gives it back inside END
(scripts.py ``take_slot``), so the cap costs no round trip or script call of its own;
``acquire``/``release`` here are the same steps on their own, for the admin CLI and tests.
"""

from __future__ import annotations

import time

import redis

from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.queue.scripts import TAKE_SLOT, LuaScript
from mcm_tasks.settings import Settings

#: a delivery that found every slot taken comes back after this (not an error: no backoff)
SLOT_RETRY = 0.05

#: ARGV: holder, now, ttl, cap, slots
_ACQUIRE = LuaScript(
    TAKE_SLOT + "return take_slot(ARGV[5], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))"
)


def slots_key(kind: str, settings: Settings) -> str:
    return queue_keys(kind, settings).slots


def _take_args(kind: str, holder: str, settings: Settings, now: float | None) -> list[object]:
    stamp = time.time() if now is None else now
    return [holder, repr(stamp), repr(settings.reconcile_lock_ttl), settings.concurrent_syncs,
            slots_key(kind, settings)]  # fmt: skip


def acquire(
    client: redis.Redis, kind: str, holder: str, settings: Settings, now: float | None = None
) -> bool:
    """Take one of the kind's ``concurrent_syncs`` slots for this delivery, or say there is none."""
    return bool(_ACQUIRE(client, [], _take_args(kind, holder, settings, now)))


def release(client: redis.Redis, kind: str, holder: str, settings: Settings) -> None:
    client.zrem(slots_key(kind, settings), holder)


def holders(client: redis.Redis, kind: str, settings: Settings) -> int:
    """Deliveries holding a slot now (the admin CLI and tests)."""
    return int(client.zcard(slots_key(kind, settings)))
