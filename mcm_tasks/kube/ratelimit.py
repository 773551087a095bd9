"""The client side rate limit of one cluster (MCM's ``--kube-api-qps`` / ``--kube-api-burst``),
shared by every process through Redis.

client-go gives each process its own limiter, so N worker pods would send N times the configured
rate. Here every request made through a cluster's ``ApiClient`` first takes a token from one
``SharedTokenBucket`` per cluster in Redis. The hook sits in the REST layer, under every generated
API method, so nothing can bypass it: a watch takes one token when it opens, however long it streams.
Each process draws its tokens through ``LeasedTokens``: a busy process takes a few at a time (only
what the bucket holds now, sized to its own recent use), so it pays one Redis round trip per batch
instead of one per request, and the fleet-wide budget still holds token for token.

When Redis cannot be reached the request goes ahead without a token (and a warning is logged at
most once a minute): Redis is a rebuildable cache here, the API server stays the source of truth
and protects itself, and a controller that stops writing because its cache is down would be worse
than one that briefly exceeds its budget.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

import redis
from kubernetes.client import ApiClient

from mcm_tasks.kube.rest import EdgeRESTClient
from mcm_tasks.ratelimit import LeasedTokens, SharedTokenBucket
from mcm_tasks.redisdb import get_redis, rkey

log = logging.getLogger(__name__)

_WARN_EVERY = 60.0


class TokenSource(Protocol):
    """What the hook needs of a limiter (``LeasedTokens`` over a ``SharedTokenBucket`` is the one used)."""

    def take(self, tokens: int = 1) -> float: ...


def cluster_bucket(cluster: str, qps: float, burst: int, redis_url: str | None = None) -> LeasedTokens:
    """This process's draw on the one bucket of a cluster; every process that names the same cluster
    draws from that bucket."""
    return LeasedTokens(
        SharedTokenBucket(
            get_redis(redis_url, decode=True), rkey("ratelimit", "kube", cluster), rate=qps, burst=burst
        )
    )


class RateLimitedRESTClient(EdgeRESTClient):
    """The client's REST layer (our edge's, ``rest.EdgeRESTClient``) with a token taken before each
    request leaves the process."""

    def __init__(self, configuration: Any, limiter: TokenSource) -> None:
        super().__init__(configuration)
        self.limiter = limiter
        self.waited = 0.0  # seconds this client spent waiting for tokens (metrics, tests)
        self._warned_at = 0.0
        self._lock = threading.Lock()

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        self._take()
        return super().request(method, url, *args, **kwargs)

    def _take(self) -> None:
        try:
            waited = self.limiter.take()
        except redis.RedisError as err:
            now = time.monotonic()
            with self._lock:
                warn = now - self._warned_at >= _WARN_EVERY or not self._warned_at
                if warn:
                    self._warned_at = now
            if warn:
                log.warning("kube API rate limit not applied, Redis unavailable: %s", err)
            return
        if waited:
            with self._lock:
                self.waited += waited


def install_rate_limit(api_client: ApiClient, limiter: TokenSource) -> ApiClient:
    """Route every request of ``api_client`` through ``limiter``; returns the same client."""
    old = api_client.rest_client
    api_client.rest_client = RateLimitedRESTClient(api_client.configuration, limiter)
    old.close()
    return api_client


def limiter_of(api_client: ApiClient) -> RateLimitedRESTClient | None:
    rest = api_client.rest_client
    return rest if isinstance(rest, RateLimitedRESTClient) else None
