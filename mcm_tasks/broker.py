"""kombu's Redis transport with five changes (the third: one reused client per channel, see
``_create_client``; the fourth: a worker's BRPOP blocks 5 s, not 1, see ``_EventLoopBRPOP``,
and a closing channel or a change of its queues unblocks it, see ``_unblock_brpop``; the fifth:
the BRPOP's keys are packed once per queue, see ``_brpop_start``): a
channel whose connection was already released fails with a connection error instead of
``AttributeError``, and the process can list the delivery tags its channels hold unacknowledged
(``held_delivery_tags``), so that the keeper (mcm_tasks/queue/keeper.py) renews them and a dead
worker's messages are told from a live one's.

When a worker loses Redis, celery 5.7 collects the broker connection, which releases its transport,
and reconnects with a new one. The old connection's channel can still be used afterwards: its close
restores the messages it had delivered but not yet acknowledged, and a reconcile that was running
during the outage acknowledges its message when it ends. Through a released transport kombu fails
with ``AttributeError`` (``'NoneType' object has no attribute 'hostname'``), which nothing expects,
and the worker dies with "Unrecoverable error" (seen when Redis restarted while reconciles ran).

As a connection error, the same failure is what kombu and Celery already handle: the close is
ignored, the late ack is logged and the message comes back after the visibility timeout (a
reconcile is idempotent), and a message lost with Redis costs at most a resync (the queue
contract's property 7).
"""

from __future__ import annotations

import contextlib
import time
import weakref
from typing import Any

import kombu.transport as kombu_transport
import redis
from kombu.transport import redis as kombu_redis

#: kombu's name for this transport
TRANSPORT = f"{__name__}:Transport"
#: the URL schemes it serves in place of kombu's own Redis transport
SCHEMES = ("redis", "rediss")
#: kombu's name for the Sentinel twin, and the scheme it serves (``sentinel://H1:P1;sentinel://H2:P2``)
SENTINEL_TRANSPORT = f"{__name__}:SentinelTransport"
SENTINEL_SCHEME = "sentinel"


#: seconds a worker's BRPOP blocks when no message comes (kombu's default: 1); see ``_EventLoopBRPOP``
EVENT_LOOP_BRPOP_TIMEOUT = 5.0

#: the channels of this process (the consumer's, producers'): their QoS holds the unacked tags
_channels: weakref.WeakSet[Channel] = weakref.WeakSet()


def held_delivery_tags() -> list[str]:
    """Delivery tags this process has received and not yet acknowledged (kombu's ``unacked`` hash
    and ``unacked_index`` sorted set hold them in Redis until the ack). Read from another thread
    than the consumer's: a copy is retried if the dict changes under it."""
    tags: list[str] = []
    for channel in list(_channels):
        qos = getattr(channel, "_qos", None)
        if qos is None:
            continue
        for _ in range(5):
            try:
                # acknowledged or rejected tags wait in ``_dirty`` until kombu flushes them: they are
                # not ours any more (a rejected message may be held by another worker by now)
                done = set(qos._dirty)
                tags.extend(tag for tag in list(qos._delivered) if tag not in done)
                break
            except RuntimeError:  # changed size during iteration
                continue
    return tags


class _Changes:
    """The two changes, for the plain and the Sentinel channel alike."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _channels.add(self)  # type: ignore[arg-type]

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:  # type: ignore[attr-defined]
            raise redis.exceptions.ConnectionError("the broker connection of this channel was released")
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]
        return params

    def _create_client(self, asynchronous: bool = False) -> Any:
        """kombu builds a new ``redis.Redis`` for every ack, publish and event batch (its
        ``conn_or_acquire``), and redis-py's constructor is dear (its response-callback table):
        about 2 % of a busy worker's CPU. A client is thread-safe and takes a connection from the
        pool per command, so the channel keeps one per pool. (The asynchronous client, which holds
        the BRPOP connection, stays kombu's.)"""
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[misc]
        pool = self.pool  # type: ignore[attr-defined]
        cached = self.__dict__.get("_mcm_client")
        if cached is None or cached[0] is not pool:
            cached = self.__dict__["_mcm_client"] = (pool, super()._create_client())  # type: ignore[misc]
        return cached[1]

    @property
    def active_queues(self) -> list[str]:
        """kombu's list of the queues consumed, kept until they change (``_update_queue_cycle``):
        kombu builds it afresh on every turn of the event loop, and a seed-mode worker consumes
        a few hundred queues. Callers only read it."""
        cached: list[str] | None = self.__dict__.get("_mcm_active_queues")
        if cached is None:
            cached = self.__dict__["_mcm_active_queues"] = super().active_queues  # type: ignore[misc]
        return cached

    def _update_queue_cycle(self) -> None:
        self.__dict__.pop("_mcm_active_queues", None)
        super()._update_queue_cycle()  # type: ignore[misc]

    def _brpop_start(self, timeout: float | None = None) -> None:
        """kombu's ``_brpop_start``, with each queue's keys packed once: the BRPOP names every
        queue at each priority (in seed mode 50 namespaces x 6 kinds x 2), and kombu named,
        prefixed and packed them all again for every message (a tenth of a seed worker's CPU in
        a scale-up). The order is kombu's: each priority, then the queues in the cycle's order
        (the queue just served goes last: round robin). Also learns the BRPOP connection's Redis
        client id (once per socket), so that ``close`` can unblock it."""
        connection = self.client.connection  # type: ignore[attr-defined]
        with contextlib.suppress(*_UNBLOCK_ERRORS):
            connection.connect()  # a no-op when connected: the id is the socket's
            sock = connection._sock
            if sock is not None and self.__dict__.get("_mcm_brpop_id", (None,))[0] is not sock:
                connection.send_command("CLIENT", "ID")
                self.__dict__["_mcm_brpop_id"] = (sock, int(connection.read_response()))
        if timeout is None:
            timeout = self.brpop_timeout  # type: ignore[attr-defined]
        queues = self._queue_cycle.consume(len(self.active_queues))  # type: ignore[attr-defined]
        if not queues:
            return
        packed = self.__dict__.setdefault("_mcm_brpop_keys", {})
        if len(packed) > 4 * len(queues) * len(self.priority_steps) + 64:  # type: ignore[attr-defined]
            packed.clear()  # queues come and go (seed mode): forget the ones gone
        parts: list[bytes] = []
        for priority in self.priority_steps:  # type: ignore[attr-defined]
            for queue in queues:
                part = packed.get((queue, priority))
                if part is None:
                    name = self._q_for_pri(queue, priority)  # type: ignore[attr-defined]
                    part = packed[(queue, priority)] = _bulk(
                        (self.global_keyprefix or "") + name  # type: ignore[attr-defined]
                    )
                parts.append(part)
        parts.append(_bulk(repr(timeout or 0)))
        self._in_poll = connection
        self._brpop_sent_at = time.monotonic()
        connection.send_packed_command([b"*%d\r\n%s%s" % (len(parts) + 1, _BRPOP, b"".join(parts))])

    def _unblock_brpop(self) -> None:
        """End this channel's BRPOP in flight at once (``CLIENT UNBLOCK`` from another connection:
        it replies as on a timeout, popping nothing). An unblock that fails leaves the BRPOP to
        end with its block."""
        known = self.__dict__.get("_mcm_brpop_id")
        connection = getattr(self, "_in_poll", None)
        if connection and known is not None and getattr(connection, "_sock", None) is known[0]:
            with contextlib.suppress(*_UNBLOCK_ERRORS), self.conn_or_acquire() as client:  # type: ignore[attr-defined]
                client.client_unblock(known[1])

    def basic_consume(self, queue: str, *args: Any, **kwargs: Any) -> Any:
        """A BRPOP in flight names the queues consumed when it was sent: a queue added now (a
        remote-control ``add_consumer``) would wait out the block, so the BRPOP is sent again."""
        tag = super().basic_consume(queue, *args, **kwargs)  # type: ignore[misc]
        self._unblock_brpop()
        return tag

    def basic_cancel(self, consumer_tag: str) -> Any:
        """As ``basic_consume``: a cancelled queue leaves the BRPOP at once."""
        result = super().basic_cancel(consumer_tag)  # type: ignore[misc]
        self._unblock_brpop()
        return result

    def close(self) -> None:
        """kombu's close reads the reply of a BRPOP in flight (a message it popped must not be
        lost), which waits out the block (5 s on a worker): a warm shutdown waited that long. The
        BRPOP is unblocked first, so the close reads that reply at once."""
        self._unblock_brpop()
        super().close()  # type: ignore[misc]


def _bulk(text: str) -> bytes:
    """One argument of a Redis command in the protocol's form (RESP bulk string)."""
    raw = text.encode()
    return b"$%d\r\n%s\r\n" % (len(raw), raw)


_BRPOP = _bulk("BRPOP")

#: an unblock that fails leaves the BRPOP to end with its block, as before
_UNBLOCK_ERRORS = (redis.RedisError, OSError, ValueError)


class Channel(_Changes, kombu_redis.Channel):  # type: ignore[misc]
    pass


class _EventLoopBRPOP:
    """A consumer on an event loop (the worker's) blocks in BRPOP for ``brpop_timeout`` seconds
    (transport option ``mcm_event_loop_brpop_timeout``, default ``EVENT_LOOP_BRPOP_TIMEOUT``)
    instead of kombu's 1: an idle worker sent a BRPOP every second. BRPOP returns as soon as a
    message arrives, so pickup is no slower. Callers of ``drain_events`` without an event loop (an
    ``inspect`` in the admin CLI or Flower) keep kombu's 1 s: their channel's close reads the BRPOP
    in flight, and they close soon after their own short timeout. A worker's warm shutdown may wait
    up to the longer block for its last BRPOP's reply; a half-open connection is dropped after it
    plus ``health_check_interval``."""

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        timeout = float(
            self.client.transport_options.get(  # type: ignore[attr-defined]
                "mcm_event_loop_brpop_timeout", EVENT_LOOP_BRPOP_TIMEOUT
            )
        )
        self.brpop_timeout = timeout  # channels made later read it
        for channel in list(getattr(self, "channels", ())):
            channel.brpop_timeout = timeout
        super().register_with_event_loop(connection, loop)  # type: ignore[misc]


class Transport(_EventLoopBRPOP, kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel


class SentinelChannel(_Changes, kombu_redis.SentinelChannel):  # type: ignore[misc]
    pass


class SentinelTransport(_EventLoopBRPOP, kombu_redis.SentinelTransport):  # type: ignore[misc]
    """``sentinel://`` URLs (``mcm_tasks.redisdb``): the master the sentinels name."""

    Channel = SentinelChannel


def register_transport() -> None:
    """Make ``redis://`` (and ``rediss://``) URLs select this transport in this process.

    Selecting it with Celery's ``broker_transport`` instead would rename the connection's URL to
    ``mcm_tasks.broker:Transport://…``, which Flower cannot map to a broker ("'redis' broker is not
    supported"): no Broker page, no queue lengths. Through kombu's alias table the URL, and
    everything that reads it, stays ``redis://``.
    """
    aliases = {**dict.fromkeys(SCHEMES, TRANSPORT), SENTINEL_SCHEME: SENTINEL_TRANSPORT}
    for scheme, transport in aliases.items():
        kombu_transport.TRANSPORT_ALIASES[scheme] = transport
        kombu_transport._transport_cache.pop(scheme, None)  # resolved before this call
