"""The machine controller's freeze flag (MCM's ``MachineControllerFrozen``).

The API-server safety job sets it when the control or target API server has been unreachable for
longer than the status-check timeout, and clears it when both answer again. While it is set, machine
reconciles of machines that are not being deleted do nothing but come back after LongRetry. It lives
in Redis so that every worker process sees one value; the key is defined here and nowhere else.
"""

from __future__ import annotations

import redis

from mcm_tasks.redisdb import get_redis, rkey


def frozen_key() -> str:
    return rkey("safety", "machine-controller-frozen")


def is_frozen(client: redis.Redis | None = None) -> bool:
    return bool((client or get_redis()).exists(frozen_key()))


def set_frozen(frozen: bool, client: redis.Redis | None = None) -> None:
    """Set or clear the flag (the safety job's side)."""
    conn = client or get_redis()
    if frozen:
        conn.set(frozen_key(), "1")
    else:
        conn.delete(frozen_key())
