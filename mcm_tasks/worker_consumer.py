"""The Celery worker's consumer, hardened so that losing Redis never ends a worker process.

celery 5.7, on a broker connection lost after it was established, collects the connection (which
releases its transport) and then closes it. When the collect could not finish closing the default
channel (Redis was already gone) and that channel still holds delivered, unacknowledged messages,
the close tries to restore them through the released transport and kombu raises ``AttributeError``
(``'NoneType' object has no attribute 'hostname'``). Only connection errors are ignored there, so
the worker dies with "Unrecoverable error", seen when Redis restarted while reconciles ran.

The connection is being thrown away at that point, so a failure to close it cleanly loses
nothing that is not already covered: unacknowledged messages come back after the visibility
timeout, and a message lost with Redis costs at most a resync (the queue contract's property 7).
The consumer then reconnects as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

log = logging.getLogger(__name__)


def close_quietly(connection: Any) -> None:
    """Make ``connection.close`` (and ``release``, its alias) log instead of raise: the caller is
    discarding a broken connection and has nothing better to do with the error."""
    close: Callable[[], None] = connection.close

    def guarded() -> None:
        try:
            close()
        except Exception as err:  # a half-released kombu connection: whatever it raises, it is gone
            log.warning("closing the lost broker connection failed, dropped: %s: %s", type(err).__name__, err)

    connection.close = guarded
    connection.release = guarded


class Consumer(CeleryConsumer):  # type: ignore[misc]
    def on_connection_error_after_connected(self, exc: Exception) -> None:
        if self.connection is not None:
            close_quietly(self.connection)
        super().on_connection_error_after_connected(exc)
