"""The process's Redis connections and the project's key naming.

Every Redis key the controller writes starts with ``settings.key_prefix`` so several
installations can share one Redis, and so that ``keys()`` shows at a glance what belongs to what.
"""

from __future__ import annotations

import threading

import redis

from mcm_tasks.settings import get_settings

_lock = threading.Lock()
_clients: dict[tuple[str, bool, int], redis.Redis] = {}


def get_redis(url: str | None = None, *, decode: bool = True) -> redis.Redis:
    """A pooled client per (url, decode) and process; forked children get their own pool."""
    import os

    target = url or get_settings().redis_url
    ident = (target, decode, os.getpid())
    client = _clients.get(ident)
    if client is None:
        with _lock:
            client = _clients.get(ident)
            if client is None:
                client = redis.Redis.from_url(
                    target,
                    decode_responses=decode,
                    health_check_interval=30,
                    socket_keepalive=True,
                    retry_on_timeout=True,
                )
                _clients[ident] = client
    return client


def rkey(*parts: str) -> str:
    """``<prefix>:<part>:<part>…`` — the one place key names are assembled."""
    return ":".join((get_settings().key_prefix, *parts))


def close_all() -> None:
    with _lock:
        for client in _clients.values():
            client.close()
        _clients.clear()
