"""A token bucket shared by every process through Redis.

MCM limits each process to ``kube-api-qps`` / ``kube-api-burst``; with N worker pods that would
multiply the load on the API server, so here one bucket per (cluster, purpose) lives in Redis and
all processes draw from it. The same bucket limits cloud API calls per account and region.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

# KEYS[1] bucket hash; ARGV: rate/s, burst, now (s, float), requested tokens.
# Returns the seconds to wait before the tokens are available (0 = granted now). A caller that
# must wait has its tokens reserved already (the bucket may go negative), so waiters are served
# in arrival order and nobody starves.
_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil then tokens = burst; ts = now end
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate)
  ts = now
end
tokens = tokens - want
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', ts)
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 60)
if tokens >= 0 then return '0' end
return tostring(-tokens / rate)
"""


@dataclass
class SharedTokenBucket:
    """``take()`` blocks until a token is available; ``try_take()`` never blocks."""

    client: redis.Redis
    key: str
    rate: float
    burst: int
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError("rate must be > 0")
        self._script = self.client.register_script(_TAKE)

    def reserve(self, tokens: int = 1) -> float:
        """Reserve tokens; the seconds the caller must wait before using them."""
        burst = max(self.burst, 1)
        wait = self._script(keys=[self.key], args=[self.rate, burst, self.clock(), tokens])
        return float(wait)

    def take(self, tokens: int = 1) -> float:
        wait = self.reserve(tokens)
        if wait > 0:
            self.sleep(wait)
        return wait

    def reserve_within(self, max_wait: float, tokens: int = 1) -> float | None:
        """Reserve tokens if they are available within ``max_wait`` seconds and return the wait;
        otherwise hand the reservation back and return None."""
        wait = self.reserve(tokens)
        if wait > max_wait:
            self.client.hincrbyfloat(self.key, "tokens", tokens)
            return None
        return wait

    def try_take(self, tokens: int = 1) -> bool:
        """Take only if available now (nothing is reserved when refused)."""
        return self.reserve_within(0.0, tokens) is not None
