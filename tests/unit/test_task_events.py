"""The task-event flush timer (mcm_tasks/task_events.py): armed only while an event waits.

A real kombu hub and timer and a real Celery event dispatcher over kombu's memory transport;
the hub's loop is stepped by hand (its ready callbacks, then its due timers), as a worker turns it.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterator
from time import monotonic
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery
from kombu import Connection
from kombu.asynchronous import Hub
from kombu.asynchronous.timer import Timer

from mcm_tasks.task_events import FLUSH_INTERVAL, BatchedTaskEvents


class Consumer(SimpleNamespace):
    """What the bootstep uses of Celery's consumer: its hub, dispatcher and flush."""

    def _flush_events(self) -> None:
        self.flushes += 1
        self.event_dispatcher.flush()


@pytest.fixture
def consumer() -> Iterator[Consumer]:
    app = Celery("events-test", set_as_current=False)
    connection = Connection("memory://")
    dispatcher = app.events.Dispatcher(connection, hostname="w@test", buffer_group=["task"])
    published: list[Any] = []
    real_publish = dispatcher._publish

    def publish(event: Any, producer: Any, routing_key: str, **kwargs: Any) -> None:
        published.append(event)
        real_publish(event, producer, routing_key, **kwargs)

    dispatcher._publish = publish
    hub = Hub(Timer())
    yield Consumer(hub=hub, event_dispatcher=dispatcher, flushes=0, published=published)
    dispatcher.close()
    connection.release()


def turn(hub: Hub) -> None:
    """One turn of the hub's loop without polling: its ready callbacks, then its due timers."""
    for callback in hub._pop_ready():
        callback()
    hub.fire_timers()


def fire(hub: Hub) -> None:
    """The hub's next timer comes due: taken off the heap and run, as the loop does."""
    _, _, entry = heapq.heappop(hub.timer._queue)
    hub.timer.apply_entry(entry)


def timers(hub: Hub) -> list[Any]:
    return [entry for _, _, entry in hub.timer._queue if not entry.canceled]


def started(c: Consumer) -> BatchedTaskEvents:
    step = BatchedTaskEvents(c)
    step.start(c)
    return step


def test_an_idle_worker_holds_no_flush_timer(consumer: Consumer) -> None:
    """The flush ran every half second on an idle worker: two wake-ups a second for nothing."""
    started(consumer)
    turn(consumer.hub)
    assert timers(consumer.hub) == [], "no timer while no event waits"
    assert consumer.flushes == 0


def test_events_of_an_interval_go_in_one_flush_due_an_interval_after_the_first(consumer: Consumer) -> None:
    started(consumer)
    before = monotonic()
    for i in range(5):
        consumer.event_dispatcher.send("task-received", uuid=f"t{i}")
        turn(consumer.hub)
    [(due, _, _)] = consumer.hub.timer._queue
    assert before + FLUSH_INTERVAL <= due <= monotonic() + FLUSH_INTERVAL
    assert consumer.flushes == 0, "nothing is published before the interval"
    fire(consumer.hub)
    assert consumer.flushes == 1
    assert [len(batch) for batch in consumer.published] == [5], "one PUBLISH of all five events"
    turn(consumer.hub)
    assert timers(consumer.hub) == [], "the timer is one-shot: idle again once flushed"
    consumer.event_dispatcher.send("task-started", uuid="t0")
    turn(consumer.hub)
    assert len(timers(consumer.hub)) == 1, "the next event arms the next flush"


def test_an_event_from_a_pool_thread_arms_through_the_hubs_thread(consumer: Consumer) -> None:
    """The threads pool sends task-started/-succeeded from its threads; kombu's timer heap is the
    hub thread's alone, so the arm is handed over with call_soon (which wakes the hub)."""
    started(consumer)
    sender = threading.Thread(target=consumer.event_dispatcher.send, args=("task-succeeded",),
                              kwargs={"uuid": "t1"})  # fmt: skip
    sender.start()
    sender.join(5)
    assert timers(consumer.hub) == [], "the pool thread did not touch the timer"
    assert consumer.hub._ready, "it handed the arm to the hub"
    turn(consumer.hub)
    assert len(timers(consumer.hub)) == 1


def test_a_refused_publish_is_retried_an_interval_later(consumer: Consumer, monkeypatch: Any) -> None:
    started(consumer)
    consumer.event_dispatcher.send("task-received", uuid="t1")
    turn(consumer.hub)
    producer = consumer.event_dispatcher.producer

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("broker away")

    monkeypatch.setattr(producer, "publish", refuse)
    fire(consumer.hub)
    assert consumer.event_dispatcher._outbound_buffer, "Celery kept the batch"
    turn(consumer.hub)
    assert len(timers(consumer.hub)) == 1
    monkeypatch.undo()
    fire(consumer.hub)
    assert not consumer.event_dispatcher._outbound_buffer, "sent on the retry"
    turn(consumer.hub)
    assert timers(consumer.hub) == []


def test_a_warm_shutdown_flushes_what_waits_and_disarms(consumer: Consumer) -> None:
    step = started(consumer)
    consumer.event_dispatcher.send("task-received", uuid="t1")
    turn(consumer.hub)
    step.shutdown(consumer)
    assert [len(batch) for batch in consumer.published] == [1]
    assert timers(consumer.hub) == []
