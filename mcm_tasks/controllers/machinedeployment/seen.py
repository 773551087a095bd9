"""What a worker process remembers between the passes of a rollout, so that the next pass reads only
what may have changed: the node each machine joined as (a machine's ``node`` label is set once, when
it joins), and the nodes found carrying the autoscaler's scale-down protection.

A rollout re-checks the protection of every node of the deployment on each of its passes (upstream
``annotateNodesBackingMachineSets``): reading every machine and node of the deployment each time
grows with its size and with the number of passes, while a pass finds at most the few nodes that
joined since the last one. Each remembered fact expires after ``max_age`` (the caller's ShortRetry), so a
mark taken off by hand, or a machine re-created under the same name, is seen again within that
time. Only a shortcut: a fresh process (or a pool child) remembers nothing and reads everything,
and nothing here is needed for a decision to be right.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """key → value, each with when it was learnt (``time.monotonic``); thread-safe (threads pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[K, tuple[V, float]] = {}
        self._pruned = time.monotonic()

    def fresh(self, keys: Iterable[K], max_age: float) -> dict[K, V]:
        """The values learnt within ``max_age`` seconds among ``keys``."""
        since = time.monotonic() - max_age
        with self._lock:
            found = ((k, self._items.get(k)) for k in keys)
            return {k: hit[0] for k, hit in found if hit is not None and hit[1] >= since}

    def remember(self, items: Mapping[K, V], max_age: float) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._pruned > max_age:  # what expired is of no use: keep the memory small
                self._items = {k: hit for k, hit in self._items.items() if hit[1] >= now - max_age}
                self._pruned = now
            self._items.update((k, (v, now)) for k, v in items.items())

    def forget_where(self, which: Callable[[K], bool]) -> None:
        with self._lock:
            self._items = {k: hit for k, hit in self._items.items() if not which(k)}


#: (machine set uid, machine key) → the node the machine joined as
MACHINE_NODES: Recent[tuple[str, str], str] = Recent()
#: (deployment uid, generation, node name) → True: the node was found protected during that rollout
PROTECTED_NODES: Recent[tuple[str, int, str], bool] = Recent()
