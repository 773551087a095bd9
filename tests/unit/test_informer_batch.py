"""How the writer takes its batches: what arrives shortly after the first event joins it."""

from __future__ import annotations

import queue
import time
from typing import Any

from informers.runner import BATCH_MAX, WAKE, _take_batch, status_update


class Arrivals(queue.Queue[Any]):
    """An inbox where the events after the first arrive while the writer lingers."""

    def __init__(self, first: list[Any], later: list[Any]) -> None:
        super().__init__()
        for item in first:
            self.put(item)
        self.later = later
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        for item in self.later:
            self.put(item)


def test_events_arriving_within_the_linger_join_the_first_ones_batch() -> None:
    inbox = Arrivals(["a"], ["b", "c"])
    assert _take_batch(inbox, 0.5, linger=0.01, sleep=inbox.sleep) == ["a", "b", "c"]  # type: ignore[arg-type]
    assert inbox.slept == [0.01], "one bounded pause, not a wait per event"


def test_no_linger_takes_only_what_is_there_already() -> None:
    inbox = Arrivals(["a"], ["b"])
    assert _take_batch(inbox, 0.5, linger=0.0, sleep=inbox.sleep) == ["a"]  # type: ignore[arg-type]
    assert inbox.slept == []


def test_an_idle_inbox_gives_an_empty_batch_after_the_idle_wait() -> None:
    inbox = Arrivals([], ["late"])
    assert _take_batch(inbox, 0.01, sleep=inbox.sleep) == []  # type: ignore[arg-type]
    assert inbox.slept == [], "nothing to linger for"


def test_a_full_inbox_is_taken_at_once_up_to_the_batch_maximum() -> None:
    inbox = Arrivals(list(range(BATCH_MAX + 3)), [])
    assert _take_batch(inbox, 0.5, linger=0.01, sleep=inbox.sleep) == list(range(BATCH_MAX))  # type: ignore[arg-type]
    assert inbox.slept == [], "a full batch waits for nothing"
    assert inbox.qsize() == 3


def test_the_status_hash_is_written_when_something_in_it_changed_the_restless_with_a_refresh() -> None:
    published = {"leading": "1", "events": "5", "idle_wakeups": "7"}
    assert status_update(published, {**published, "idle_wakeups": "9"}, refresh=False) == {}, (
        "idle wakeups alone are no reason to write"
    )
    assert status_update(published, {**published, "events": "6", "idle_wakeups": "9"}, refresh=False) == {
        "events": "6",
        "idle_wakeups": "9",
    }
    assert status_update(published, {**published, "idle_wakeups": "9"}, refresh=True) == {"idle_wakeups": "9"}
    assert status_update(published, published, refresh=True) == {}, "a refresh renews the TTL alone"


def test_a_wake_ends_the_writers_idle_wait_at_once_and_is_no_event() -> None:
    """A seed-mode namespace's writer waits ``IDLE_CHECK * pace`` (5 s) when idle; stopping the
    namespace (before its lease is given up, which the shard ticks wait for) wakes it at once."""
    inbox: queue.Queue[Any] = queue.Queue()
    inbox.put(WAKE)
    started = time.monotonic()
    assert _take_batch(inbox, 30.0, linger=0.0) == []
    assert time.monotonic() - started < 1.0
    inbox.put("event-1")
    inbox.put(WAKE)
    inbox.put("event-2")
    assert _take_batch(inbox, 1.0, linger=0.0) == ["event-1", "event-2"]
