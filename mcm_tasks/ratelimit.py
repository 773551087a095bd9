"""A token bucket shared by every process through Redis.

MCM limits each process to ``kube-api-qps`` / ``kube-api-burst``; with N worker pods that would
multiply the load on the API server, so here one bucket per (cluster, purpose) lives in Redis and
all processes draw from it. The same bucket limits cloud API calls per account and region.

``LeasedTokens`` puts a small per-process stock in front of the shared bucket, so that a busy
process does not pay a Redis round trip for every request (see its docstring for why this and not
a fixed share of the budget per process).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

#: The bucket's arithmetic, shared by its scripts (and the event recorder's spam filter): a hash
#: ``tokens``, ``ts``; full (``burst``) when new, refilled at ``rate`` per second since ``ts``, up to
#: ``burst``. Tokens may go negative: a caller that must wait has reserved its tokens already, so
#: waiters are served in arrival order and nobody starves.
BUCKET = """
local function bucket_refill(key, rate, burst, now)
  local state = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens, ts = tonumber(state[1]), tonumber(state[2])
  if tokens == nil then return burst, now end
  if now > ts then return math.min(burst, tokens + (now - ts) * rate), now end
  return tokens, ts
end
local function bucket_store(key, tokens, ts, rate, burst)
  redis.call('HSET', key, 'tokens', tokens, 'ts', ts)
  redis.call('EXPIRE', key, math.ceil(burst / rate) + 60)
end
"""

# KEYS[1] bucket hash; ARGV: rate/s, burst, now (s, float), requested tokens.
# Returns the seconds to wait before the tokens are available (0 = granted now).
_TAKE = (
    BUCKET
    + """
local rate, burst, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tokens, ts = bucket_refill(KEYS[1], rate, burst, now)
tokens = tokens - tonumber(ARGV[4])
bucket_store(KEYS[1], tokens, ts, rate, burst)
if tokens >= 0 then return '0' end
return tostring(-tokens / rate)
"""
)

# The same bucket, taking up to ARGV[4] tokens but only those available now (at least 1: when none
# is, one is reserved as _TAKE does). Returns {tokens taken, seconds to wait} as strings.
_TAKE_UP_TO = (
    BUCKET
    + """
local rate, burst, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tokens, ts = bucket_refill(KEYS[1], rate, burst, now)
local got = 1
if tokens >= 1 then got = math.max(1, math.min(tonumber(ARGV[4]), math.floor(tokens))) end
tokens = tokens - got
bucket_store(KEYS[1], tokens, ts, rate, burst)
if tokens >= 0 then return {tostring(got), '0'} end
return {tostring(got), tostring(-tokens / rate)}
"""
)


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
        self._script_up_to = self.client.register_script(_TAKE_UP_TO)

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

    def reserve_up_to(self, most: int) -> tuple[int, float]:
        """Take up to ``most`` tokens, only as many as the bucket holds now, and at least one (when
        none is there, one is reserved as ``reserve`` does): (tokens taken, seconds to wait)."""
        burst = max(self.burst, 1)
        got, wait = self._script_up_to(keys=[self.key], args=[self.rate, burst, self.clock(), max(1, most)])
        return int(got), float(wait)

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


class LeasedTokens:
    """A process's small stock of tokens drawn from a ``SharedTokenBucket`` in batches: ``take()``
    spends from the stock and goes to Redis only when it is empty.

    The fleet-wide budget holds exactly as with one round trip per token: every token spent was taken
    from the shared bucket first, and a batch only takes tokens the bucket holds *now* (never a
    reservation ahead; when the bucket is empty one token is reserved and waited for, as before).
    A batch follows this process's own pace: the next one is what the last one lasted, scaled to
    ``window`` seconds of use (at most twice the last, at most ``window`` × rate, at least 1). A
    process that makes a request now and then draws one token at a time; a busy one one round trip
    per ``window`` of its use. Tokens held longer than ``hold`` are dropped unused: a stock never
    outlives the moment it was drawn for, and dropping errs on the safe side of the budget.

    Decided against a fixed share (rate / live processes) in every process: it caps a process at
    its share while the others are idle (one busy worker could use a sixth of the budget), and it
    depends on counting live processes. An earlier try reserved whole batches ahead, waits
    included: processes queued for tokens they never used and the scale-up slowed by half; this one
    takes only what is there, and only as much as its own use just showed it needs.

    A forked child starts with an empty stock (the parent's tokens are the parent's).
    """

    def __init__(
        self,
        bucket: SharedTokenBucket,
        window: float = 0.25,
        hold: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bucket = bucket
        self.window = window
        self.hold = hold
        self.clock = clock
        self.most = max(1, math.floor(bucket.rate * window))
        #: Redis round trips made (tests, metrics)
        self.draws = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._stock = 0
        self._drawn_at: float | None = None
        self._last = 1  # tokens the last draw took

    @property
    def rate(self) -> float:
        return self.bucket.rate

    @property
    def burst(self) -> int:
        return self.bucket.burst

    @property
    def key(self) -> str:
        return self.bucket.key

    def _batch(self, now: float) -> int:
        """The next draw's size, from how long the last one lasted."""
        if self._drawn_at is None:
            return 1
        lasted = now - self._drawn_at
        grown = 2 * self._last
        if lasted > 0:
            grown = min(grown, math.ceil(self._last * self.window / lasted))
        return max(1, min(self.most, grown))

    def take(self, tokens: int = 1) -> float:
        """Spend ``tokens`` (1: one request), waiting if the shared bucket makes us; the seconds waited."""
        with self._lock:
            now = self.clock()
            if os.getpid() != self._pid:
                self._pid, self._stock, self._drawn_at = os.getpid(), 0, None
            if self._stock and self._drawn_at is not None and now - self._drawn_at > self.hold:
                self._stock = 0
            if self._stock >= tokens:
                self._stock -= tokens
                return 0.0
            got, wait = self.bucket.reserve_up_to(max(tokens - self._stock, self._batch(now)))
            self.draws += 1
            self._last, self._drawn_at = got, now
            self._stock += got - tokens
            if self._stock < 0:
                # the bucket held fewer than a multi-token take needs: the rest reserved as before
                wait = max(wait, self.bucket.reserve(-self._stock))
                self._stock = 0
        if wait > 0:
            self.bucket.sleep(wait)
        return wait
