"""How the writer takes its batches: what arrives shortly after the first event joins it."""

from __future__ import annotations

import queue
from typing import Any

from informers.runner import BATCH_MAX, _take_batch


class Arrivals:
    """An inbox whose items arrive one by one: each only to a blocking ``get`` (nothing is ever there
    already for ``get_nowait``), as events trickling in from a watch faster than the writer."""

    def __init__(self, items: list[Any]) -> None:
        self.items = list(items)
        self.waits: list[float | None] = []

    def get(self, timeout: float | None = None) -> Any:
        self.waits.append(timeout)
        if not self.items:
            raise queue.Empty
        return self.items.pop(0)

    def get_nowait(self) -> Any:
        raise queue.Empty


def test_events_arriving_within_the_linger_join_the_first_ones_batch() -> None:
    inbox = Arrivals(["a", "b", "c"])
    assert _take_batch(inbox, 0.5, linger=5.0) == ["a", "b", "c"]  # type: ignore[arg-type]
    assert inbox.waits[0] == 0.5
    assert all(w is not None and 0 < w <= 5.0 for w in inbox.waits[1:]), "bounded waits only"


def test_no_linger_takes_only_what_is_there_already() -> None:
    inbox = Arrivals(["a", "b"])
    assert _take_batch(inbox, 0.5, linger=0.0) == ["a"]  # type: ignore[arg-type]


def test_an_idle_inbox_gives_an_empty_batch_after_the_idle_wait() -> None:
    inbox = Arrivals([])
    assert _take_batch(inbox, 0.01) == []  # type: ignore[arg-type]
    assert inbox.waits == [0.01]


def test_a_batch_stops_at_its_maximum_however_fast_events_come() -> None:
    inbox: queue.Queue[int] = queue.Queue()
    for i in range(BATCH_MAX + 3):
        inbox.put(i)
    assert _take_batch(inbox, 0.5, linger=5.0) == list(range(BATCH_MAX))  # type: ignore[arg-type]
    assert inbox.qsize() == 3
