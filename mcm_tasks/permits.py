"""The permit giver: a bounded number of permits per key, shared by every worker process through Redis.

MCM keeps its permits in memory (one buffered channel per key) because one process marks machines
Failed. Here any worker may, so a permit is an entry in a Redis sorted set, taken and given back by
atomic scripts:

- ``register_permits(key, n)`` sets how many permits the key has (idempotent; 0 or unregistered =
  none can be taken);
- ``try_permit(key, timeout)`` takes one, polling until ``timeout`` — short by design, the caller's
  worker slot is busy meanwhile — and returns a token, or None;
- ``release_permit(key, token)`` gives it back; ``delete_permits(key)`` forgets the key.

Two kinds of staleness are handled without a janitor process: a permit held longer than its
``lease`` (its holder died mid-reconcile) is reclaimed by the next taker, and a key nobody touched for
``permit_stale_after`` expires from Redis (upstream's janitor).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import redis

from mcm_tasks.redisdb import get_redis, rkey
from mcm_tasks.settings import get_settings

#: KEYS: capacity, holders. ARGV: now, lease, expire_seconds, token
_ACQUIRE = """
local capacity = tonumber(redis.call('GET', KEYS[1]) or '0')
if capacity <= 0 then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[2]) >= capacity then return 0 end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
"""

#: how often a waiting taker looks again
POLL_INTERVAL = 0.02


class PermitGiver:
    def __init__(
        self,
        client: redis.Redis | None = None,
        *,
        stale_after: float | None = None,
        lease: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        settings = get_settings()
        self.redis = client if client is not None else get_redis()
        self.stale_after = settings.permit_stale_after if stale_after is None else stale_after
        self.lease = settings.reconcile_lock_ttl if lease is None else lease
        self.clock = clock
        self._acquire = self.redis.register_script(_ACQUIRE)

    @staticmethod
    def _keys(key: str) -> tuple[str, str]:
        return rkey("permits", key, "capacity"), rkey("permits", key, "holders")

    def _expire_seconds(self) -> int:
        return max(1, int(self.stale_after))

    def register_permits(self, key: str, permits: int) -> None:
        """Upstream: ``RegisterPermits``, ``TryToGetPermit``, ``ReleasePermit``, ``DeletePermits``."""
        capacity, holders = self._keys(key)
        pipe = self.redis.pipeline()
        pipe.set(capacity, int(permits), ex=self._expire_seconds())
        pipe.expire(holders, self._expire_seconds())
        pipe.execute()

    def try_permit(self, key: str, timeout: float) -> str | None:
        token = secrets.token_hex(8)
        deadline = time.monotonic() + max(timeout, 0.0)
        keys = list(self._keys(key))
        while True:
            args: list[float | int | str] = [self.clock(), self.lease, self._expire_seconds(), token]
            if self._acquire(keys=keys, args=args):
                return token
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_INTERVAL)

    def release_permit(self, key: str, token: str) -> None:
        self.redis.zrem(self._keys(key)[1], token)

    def delete_permits(self, key: str) -> None:
        self.redis.delete(*self._keys(key))

    def held(self, key: str) -> int:
        """Permits currently taken (stale ones included until the next take reclaims them)."""
        return int(self.redis.zcard(self._keys(key)[1]))  # type: ignore[arg-type]


def get_permit_giver() -> PermitGiver:
    return PermitGiver()
