"""The process's Redis connections and the project's key naming: the one factory every Redis client
of the project is made by (redis-py clients here; the broker's and beat's options from the same
settings in ``broker_options`` / ``redbeat_options``).

One setting says where Redis is (``--redis-url``):

- ``redis://[user:password@]host:port/db`` or ``unix://``: one server;
- ``rediss://…``: the same over TLS (``--redis-tls-ca-file``, ``--redis-tls-cert-file``,
  ``--redis-tls-key-file``);
- ``sentinel://H1:P1;sentinel://H2:P2/db``, as kombu spells it, with ``--redis-sentinel-master``: the
  master that the sentinels name, followed through failovers. ``--redis-sentinel-password`` is the
  sentinels' own password; ``--redis-tls`` turns TLS on for the sentinels and the servers alike.

``--redis-username`` / ``--redis-password`` (an ACL user, docs/install/redis.md) override the
URL's user info, so the password can come from a Secret through ``MCM_REDIS_PASSWORD``.

Through a Sentinel failover a command that meets a dead or demoted master (``ConnectionError``;
``READONLY`` from a demoted master becomes one) asks the sentinels again and retries with backoff
for up to ``--redis-failover-timeout``; Lua scripts are loaded again on the new master
(``mcm_tasks.queue.scripts``). Every Redis key the controller writes starts with
``settings.key_prefix`` so several installations can share one Redis.
"""

from __future__ import annotations

import os
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from redis.sentinel import (
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)

from mcm_tasks.broker import SENTINEL_SCHEME
from mcm_tasks.settings import Settings, get_settings

#: backoff of a command's retries through a failover
_BACKOFF_BASE, _BACKOFF_CAP = 0.05, 1.0

_lock = threading.Lock()
_clients: dict[tuple[Any, ...], redis.Redis] = {}


@dataclass(frozen=True)
class RedisTarget:
    """Where Redis is and how to talk to it, parsed from the settings."""

    url: str
    #: (host, port) of each sentinel; empty for a plain URL
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None
    tls: bool = False
    #: redis-py's ``ssl_*`` arguments (empty without TLS)
    tls_options: dict[str, Any] = field(default_factory=dict)
    failover_timeout: float = 30.0

    @property
    def is_sentinel(self) -> bool:
        return bool(self.sentinels)


def _sentinel_hosts(url: str) -> tuple[tuple[tuple[str, int], ...], int, str | None, str | None]:
    """(sentinels, db, username, password) of kombu's ``sentinel://h:p;sentinel://h:p/db`` form."""
    hosts: list[tuple[str, int]] = []
    db = 0
    username = password = None
    for part in url.split(";"):
        part = part.strip()
        if not part:
            continue
        parsed = urlsplit(part)
        if parsed.scheme != SENTINEL_SCHEME or not parsed.hostname:
            raise ValueError(f"not a sentinel address: {part!r} (want sentinel://host:port)")
        hosts.append((parsed.hostname, parsed.port or 26379))
        if parsed.path.strip("/"):
            db = int(parsed.path.strip("/"))
        if parsed.username and username is None:
            username = unquote(parsed.username)
        if parsed.password and password is None:
            password = unquote(parsed.password)
    return tuple(hosts), db, username, password


def tls_options(settings: Settings) -> dict[str, Any]:
    """redis-py's ``ssl_*`` arguments: verify the server against the CA file (or the system's), and
    present a client certificate when one is configured."""
    options: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    if settings.redis_tls_ca_file:
        options["ssl_ca_certs"] = settings.redis_tls_ca_file
    if settings.redis_tls_cert_file:
        options["ssl_certfile"] = settings.redis_tls_cert_file
    if settings.redis_tls_key_file:
        options["ssl_keyfile"] = settings.redis_tls_key_file
    return options


def redis_target(settings: Settings | None = None, url: str | None = None) -> RedisTarget:
    """The target of ``url`` (default: ``--redis-url``) with the other Redis settings applied."""
    settings = settings or get_settings()
    url = url or settings.redis_url
    scheme = urlsplit(url.split(";", 1)[0]).scheme
    tls = settings.redis_tls or scheme == "rediss"
    common: dict[str, Any] = {
        "tls": tls,
        "tls_options": tls_options(settings) if tls else {},
        "failover_timeout": settings.redis_failover_timeout,
        "sentinel_password": settings.redis_sentinel_password or None,
    }
    if scheme == SENTINEL_SCHEME:
        if not settings.redis_sentinel_master:
            raise ValueError("--redis-url names sentinels: --redis-sentinel-master is required")
        sentinels, db, username, password = _sentinel_hosts(url)
        return RedisTarget(
            url=url,
            sentinels=sentinels,
            master=settings.redis_sentinel_master,
            db=db,
            username=settings.redis_username or username,
            password=settings.redis_password or password,
            **common,
        )
    parsed = urlsplit(url)
    return RedisTarget(
        url=url,
        username=settings.redis_username or (unquote(parsed.username) if parsed.username else None),
        password=settings.redis_password or (unquote(parsed.password) if parsed.password else None),
        **common,
    )


def _failover_retry(target: RedisTarget) -> Retry:
    """Retries spanning ``failover_timeout``: the sentinels need a few seconds to promote a replica."""
    spent, retries = 0.0, 0
    while spent < target.failover_timeout:
        spent += min(_BACKOFF_CAP, _BACKOFF_BASE * 2**retries)
        retries += 1
    return Retry(ExponentialBackoff(cap=_BACKOFF_CAP, base=_BACKOFF_BASE), retries)


class _FollowingConnection(SentinelManagedConnection):
    """A Sentinel-managed connection that asks the sentinels for the master whenever it reconnects.

    redis-py (8.1) asks them only when the pool hands a connection out (``connect``). A command whose
    connection broke under it (the master killed mid-command) reconnects in ``send_packed_command``
    to the address it had: every retry of the command went to the dead master until the retries ran
    out, and the failover reached the caller (``test_redis_sentinel``, about one CI run in ten). One
    attempt here; the command's own retry (``--redis-failover-timeout``) repeats it."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self._sock:
            self._connect_retry()
        super().send_packed_command(command, check_health)


class _FollowingSSLConnection(_FollowingConnection, SentinelManagedSSLConnection):
    """``_FollowingConnection`` over TLS."""


class _RetryingPool(SentinelConnectionPool):
    """A Sentinel pool whose hand-out is retried as the command is, of connections that follow the
    master (``_FollowingConnection``). redis-py takes a connection from the pool outside the
    command's retry, and the pool checks a pooled connection there: one broken by the failover is
    reconnected once, and an error of that reconnect (the sentinels still name the dead master)
    reached the caller instead of being retried through the failover."""

    def __init__(self, service_name: str, sentinel_manager: Any, **kwargs: Any) -> None:
        tls = bool(kwargs.pop("ssl", False))
        kwargs.setdefault("connection_class", _FollowingSSLConnection if tls else _FollowingConnection)
        super().__init__(service_name, sentinel_manager, **kwargs)

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        retry = self.connection_kwargs.get("retry")
        if retry is None:
            return SentinelConnectionPool.get_connection(self, *args, **kwargs)
        return retry.call_with_retry(
            lambda: SentinelConnectionPool.get_connection(self, *args, **kwargs), lambda _error: None
        )


def _connection_kwargs(target: RedisTarget, decode: bool) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "decode_responses": decode,
        "health_check_interval": 30,
        "socket_keepalive": True,
        "retry_on_timeout": True,
    }
    return _with_auth(kwargs, target, target.username, target.password)


def sentinel_kwargs(target: RedisTarget) -> dict[str, Any]:
    """How to talk to the sentinels themselves (their password, TLS)."""
    kwargs: dict[str, Any] = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
    return _with_auth(kwargs, target, None, target.sentinel_password)


def _with_auth(
    kwargs: dict[str, Any], target: RedisTarget, username: str | None, password: str | None
) -> dict[str, Any]:
    if username:
        kwargs["username"] = username
    if password:
        kwargs["password"] = password
    if target.tls:
        kwargs["ssl"] = True
        kwargs.update(target.tls_options)
    return kwargs


def connect(target: RedisTarget, *, decode: bool = True, timeout: float | None = None) -> redis.Redis:
    """A new client of ``target``: the sentinels' master, or the server of the URL. ``timeout``
    (probes): a socket timeout of that many seconds and no retrying through a failover."""
    kwargs = _connection_kwargs(target, decode)
    if timeout is not None:
        kwargs.update(socket_timeout=timeout, socket_connect_timeout=timeout, retry_on_timeout=False)
    if target.is_sentinel:
        sentinel = Sentinel(
            list(target.sentinels),
            sentinel_kwargs=sentinel_kwargs(target),
            socket_connect_timeout=timeout or 2.0,
            socket_timeout=timeout or 10.0,
        )
        retry = _failover_retry(target) if timeout is None else Retry(ExponentialBackoff(), 0)
        client: redis.Redis = sentinel.master_for(
            target.master,
            connection_pool_class=_RetryingPool,
            db=target.db,
            retry=retry,
            retry_on_error=[redis.exceptions.ConnectionError, redis.exceptions.ReadOnlyError],
            **kwargs,
        )
        return client
    url = target.url
    if target.tls and url.startswith("redis://"):
        url = "rediss://" + url.removeprefix("redis://")
    for name in ("username", "password", "ssl"):  # the URL carries them
        kwargs.pop(name, None)
    return redis.Redis.from_url(_with_credentials(url, target), **kwargs)


def master_address(client: redis.Redis) -> tuple[str, int] | None:
    """The master a Sentinel client last connected to (no round trip); None for a plain client."""
    address = getattr(client.connection_pool, "master_address", None)
    return None if address is None else (str(address[0]), int(address[1]))


def _with_credentials(url: str, target: RedisTarget) -> str:
    """The URL with the target's username and password as its user info (``--redis-password``
    overrides the URL's)."""
    parsed = urlsplit(url)
    if parsed.scheme == "unix" or not (target.username or target.password):
        return url
    user = quote(target.username or "", safe="")
    userinfo = f"{user}:{quote(target.password or '', safe='')}" if target.password else user
    host = parsed.hostname or ""
    netloc = f"{userinfo}@{host}" + (f":{parsed.port}" if parsed.port else "")
    return urlunsplit((parsed.scheme, netloc, parsed.path, parsed.query, parsed.fragment))


def get_redis(url: str | None = None, *, decode: bool = True) -> redis.Redis:
    """A pooled client per (target, decode) and process; forked children get their own pool."""
    settings = get_settings()
    ident = (
        url or settings.redis_url,
        settings.redis_sentinel_master,
        settings.redis_username,
        settings.redis_password,
        settings.redis_tls,
        decode,
        os.getpid(),
    )
    client = _clients.get(ident)
    if client is None:
        with _lock:
            client = _clients.get(ident)
            if client is None:
                client = connect(redis_target(settings, url), decode=decode)
                _clients[ident] = client
    return client


# --- the broker (kombu) and beat (celery-redbeat) from the same settings ---------------------------------


def broker_url(target: RedisTarget) -> str:
    """The URL kombu gets: credentials in it (kombu takes them from there), ``rediss`` under TLS."""
    if target.is_sentinel:
        first, *rest = target.url.split(";")
        return ";".join([_with_credentials(first.strip(), target), *(r.strip() for r in rest if r.strip())])
    url = target.url
    if target.tls and url.startswith("redis://"):
        url = "rediss://" + url.removeprefix("redis://")
    return _with_credentials(url, target)


def broker_options(settings: Settings) -> dict[str, Any]:
    """Celery's broker settings for the target: URL, Sentinel and TLS options (the URL's scheme picks
    the transport: ``mcm_tasks.broker.register_transport``). The transport options are to be merged
    into the broker's own."""
    target = redis_target(settings)
    transport_options: dict[str, Any] = {}
    if target.is_sentinel:
        transport_options["master_name"] = target.master
        transport_options["sentinel_kwargs"] = sentinel_kwargs(target)
    return {
        "broker_url": broker_url(target),
        "broker_use_ssl": dict(target.tls_options) if target.tls else None,
        "transport_options": transport_options,
    }


def redbeat_options(settings: Settings) -> dict[str, Any]:
    """celery-redbeat's settings for the target: its sentinel options, or a plain URL, and TLS."""
    target = redis_target(settings)
    retry_period = max(1.0, target.failover_timeout)
    if target.is_sentinel:
        options: dict[str, Any] = {
            "sentinels": list(target.sentinels),
            "service_name": target.master,
            "db": target.db,
            "socket_timeout": 10.0,
            "sentinel_kwargs": sentinel_kwargs(target),
            "retry_period": retry_period,
        }
        if target.username:
            options["username"] = target.username
        if target.password:
            options["password"] = target.password
        return {
            "redbeat_redis_url": "redis-sentinel://",
            "redbeat_redis_options": options,
            "redis_use_ssl": dict(target.tls_options) if target.tls else None,
        }
    return {
        "redbeat_redis_url": broker_url(target),
        "redbeat_redis_options": {"retry_period": retry_period},
        "redis_use_ssl": dict(target.tls_options) if target.tls else None,
    }


#: what the project does with Redis, as ACL categories and commands: data types, scripts, MULTI,
#: pub/sub (Celery's events and remote control), PING/HELLO/AUTH/SELECT; never @admin or @dangerous
#: commands (KEYS, FLUSHALL, CONFIG, DEBUG, SHUTDOWN, MONITOR …), bar INFO (Flower's broker page);
#: and TIME (kombu's binding scripts); CLIENT ID and CLIENT UNBLOCK (a worker ends its own BRPOP at
#: once on shutdown or when its queues change, ``mcm_tasks.broker``: refused, it waits the block
#: out, at most 5 s; an unblocked command returns as on a timeout). CLIENT SETINFO (Redis 7.2+) is
#: left out: redis-py ignores its refusal
ACL_COMMANDS = (
    "-@all",
    "+@connection",
    "+@read",
    "+@write",
    "+@keyspace",
    "+@string",
    "+@list",
    "+@hash",
    "+@set",
    "+@sortedset",
    "+@scripting",
    "+@transaction",
    "+@pubsub",
    "-@admin",
    "-@dangerous",
    "+info",
    "+time",
    "+client|setname",
    "+client|id",
    "+client|unblock",
)


def acl_rules(username: str, password: str, key_prefix: str) -> str:
    """The ``ACL SETUSER`` rules (``users.acl`` / ``user`` line) of the project's Redis user: its
    keys under ``<key_prefix>:`` only (the broker's too, through kombu's ``global_keyprefix``), any
    pub/sub channel (Celery's event and control fanout carry no data at rest), and only the
    commands in ``ACL_COMMANDS``."""
    head = ("user", username, "on", f">{password}", "resetkeys", f"~{key_prefix}:*", "resetchannels", "&*")
    return " ".join((*head, *ACL_COMMANDS))


def rkey(*parts: str) -> str:
    """``<prefix>:<part>:<part>…`` — the one place key names are assembled."""
    return ":".join((get_settings().key_prefix, *parts))


def close_all() -> None:
    with _lock:
        for client in _clients.values():
            client.close()
        _clients.clear()
