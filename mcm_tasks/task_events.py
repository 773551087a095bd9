"""Task events for Flower, sent in batches on a timer instead of after every turn of the loop.

A worker sends three task events per reconcile (``task-received``, ``task-started``,
``task-succeeded`` or ``task-failed``): Flower's task list, states and results come from them.
Celery buffers them and flushes the buffer on the next turn of the worker's event loop, which at a
few tasks per turn is one Redis ``PUBLISH`` (a new kombu client, a JSON document, a round trip)
per task: a tenth of a worker's CPU during a scale-up (py-spy, bench/scale.py --profile).

``BatchedTaskEvents`` (a consumer bootstep) flushes ``FLUSH_INTERVAL`` after the first event of a
batch is buffered instead, and at once when ``buffer_limit`` (24) events wait, as Celery does.
The timer is one-shot and armed only while an event waits, so an idle worker's loop holds no
flush timer and does not wake for it. Every event is still sent, with its own timestamp and
clock; Flower reads the batch (``task.multi``) like any other and shows a state at most
``FLUSH_INTERVAL`` later. Events whose publish failed (broker away) are retried every
``FLUSH_INTERVAL`` until sent. A warm shutdown flushes what waits before the dispatcher closes.

Threads: the dispatcher calls ``on_send_buffered`` in the thread that sent the event: the hub's
(prefork's result handler, the consumer, solo) or a pool thread (threads pool: ``task-started``
and ``task-succeeded``). kombu's timer is a bare heap the hub's thread alone may touch, so the
arm goes through ``hub.call_soon`` (locked, wakes the hub from another thread) and the hub's
thread enters the timer, due at the deadline taken when the event was buffered.
"""

from __future__ import annotations

import threading
from time import monotonic
from typing import Any

from celery import bootsteps
from vine import promise

#: longest an event waits in the worker before it is published (seconds)
FLUSH_INTERVAL = 0.5


class BatchedTaskEvents(bootsteps.StartStopStep):
    requires = ("celery.worker.consumer.events:Events",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.tref: Any = None
        self.c: Any = None
        self._lock = threading.Lock()
        self._due: float | None = None  # set while a flush is armed or about to be
        self._arm_promise = promise(self._arm)  # one object: the hub's ready set holds it once

    def start(self, c: Any) -> None:
        dispatcher = c.event_dispatcher
        if c.hub is None or dispatcher is None or not dispatcher.buffer_group:
            return  # no event loop: Celery sends every event at once
        self._cancel()
        self.c = c
        dispatcher.on_send_buffered = self.on_send_buffered  # instead of a flush every loop turn
        if dispatcher._outbound_buffer:  # Celery's failed publishes, carried over a reconnect
            self.on_send_buffered()

    def on_send_buffered(self) -> None:
        """An event waits: have the hub flush it ``FLUSH_INTERVAL`` from now (any thread)."""
        with self._lock:
            if self._due is not None:
                return  # the pending flush takes this event too
            self._due = monotonic() + FLUSH_INTERVAL
        self.c.hub.call_soon(self._arm_promise)

    def _arm(self) -> None:  # the hub's thread
        with self._lock:
            due = self._due
        if due is not None and self.tref is None:
            self.tref = self.c.hub.call_at(due, self._flush)

    def _flush(self) -> None:  # the hub's thread
        self.tref = None
        with self._lock:
            self._due = None  # before the flush: an event buffered during it arms the next one
        self.c._flush_events()
        dispatcher = self.c.event_dispatcher
        if dispatcher is not None and dispatcher._outbound_buffer:
            self.on_send_buffered()  # the broker refused: try again one interval later

    def stop(self, c: Any) -> None:
        self._cancel()
        c._flush_events()

    def shutdown(self, c: Any) -> None:
        self.stop(c)

    def _cancel(self) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
        with self._lock:
            self._due = None
