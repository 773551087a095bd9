"""One EC2 request budget per AWS account and region, shared by every worker process.

EC2 throttles per account and region, so N worker pods each pacing themselves would still
overrun it together. Each HTTP attempt (retries included) draws a token from a bucket in Redis
(``mcm_tasks.ratelimit.SharedTokenBucket``). A short wait is slept off; a wait longer than
``max_wait`` is refused with ``Unavailable`` so a worker slot is never parked on a throttle, and the
controller retries the key after its short retry period.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis

from mcm_tasks.ratelimit import SharedTokenBucket
from providers.errors import Code, MachineError

log = logging.getLogger(__name__)

#: EC2's own bucket for non-mutating actions refills 20/s with a burst of 100 (per account+region)
DEFAULT_QPS = 20.0
DEFAULT_BURST = 100
DEFAULT_MAX_WAIT = 5.0


class RequestLimiter:
    def __init__(
        self,
        client: redis.Redis,
        key_prefix: str,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        max_wait: float = DEFAULT_MAX_WAIT,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.key_prefix = key_prefix
        self.qps = qps
        self.burst = burst
        self.max_wait = max_wait
        self._sleep = sleep
        self._buckets: dict[tuple[str, str], SharedTokenBucket] = {}
        self._lock = threading.Lock()

    def bucket(self, account: str, region: str) -> SharedTokenBucket:
        ident = (account, region)
        with self._lock:
            found = self._buckets.get(ident)
            if found is None:
                key = f"{self.key_prefix}:{account}:{region}"
                found = SharedTokenBucket(self.client, key, rate=self.qps, burst=self.burst)
                self._buckets[ident] = found
            return found

    def acquire(self, account: str, region: str) -> None:
        """Take one request's token, waiting at most ``max_wait``; Redis trouble lets the request
        through (the limit protects the account, it is not needed for correctness)."""
        bucket = self.bucket(account, region)
        try:
            wait = bucket.reserve_within(self.max_wait)
        except redis.RedisError as err:
            log.warning("EC2 request limit not applied, Redis unavailable: %s", type(err).__name__)
            return
        if wait is None:
            raise MachineError(
                Code.Unavailable,
                f"EC2 request limit for account {account} in {region} reached "
                f"({self.qps:g}/s, burst {self.burst}); retry in more than {self.max_wait:g}s",
            )
        if wait > 0:
            self._sleep(wait)
