"""kombu's Redis transport with one change: a channel whose connection was already released fails
with a connection error instead of ``AttributeError``.

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

from typing import Any

import redis
from kombu.transport import redis as kombu_redis

#: the value of Celery's ``broker_transport`` that selects this transport
TRANSPORT = f"{__name__}:Transport"


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection of this channel was released")
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)
        return params


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel
