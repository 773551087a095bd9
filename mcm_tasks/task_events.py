"""Task events for Flower, sent in batches on a timer instead of after every turn of the loop.

A worker sends three task events per reconcile (``task-received``, ``task-started``,
``task-succeeded`` or ``task-failed``): Flower's task list, states and results come from them.
Celery buffers them and flushes the buffer on the next turn of the worker's event loop, which at a
few tasks per turn is one Redis ``PUBLISH`` (a new kombu client, a JSON document, a round trip)
per task: a tenth of a worker's CPU during a scale-up (py-spy, bench/scale.py --profile).

``BatchedTaskEvents`` (a consumer bootstep) flushes every ``FLUSH_INTERVAL`` instead, and at once
when ``buffer_limit`` (24) events wait, as Celery does. Every event is still sent, with its own
timestamp and clock; Flower reads the batch (``task.multi``) like any other and shows a state at
most ``FLUSH_INTERVAL`` later. A warm shutdown flushes what waits before the dispatcher closes.
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps

#: longest an event waits in the worker before it is published (seconds)
FLUSH_INTERVAL = 0.5


class BatchedTaskEvents(bootsteps.StartStopStep):
    requires = ("celery.worker.consumer.events:Events",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.tref: Any = None

    def start(self, c: Any) -> None:
        dispatcher = c.event_dispatcher
        if c.hub is None or dispatcher is None or not dispatcher.buffer_group:
            return  # no event loop: Celery sends every event at once
        dispatcher.on_send_buffered = None  # Celery's flush on the next turn of the loop
        self._cancel()
        self.tref = c.hub.call_repeatedly(FLUSH_INTERVAL, c._flush_events)

    def stop(self, c: Any) -> None:
        self._cancel()
        c._flush_events()

    def shutdown(self, c: Any) -> None:
        self.stop(c)

    def _cancel(self) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
