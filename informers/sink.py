"""Where routed keys go: the queue contract (Celery over Redis), or a plain Redis list.

The list sink exists for informer-side tests and for watching routing by hand (``--sink list``):
it records exactly what the informer asked for, one ``queue key`` string per item, with no Celery
between the informer and the assertion.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

import redis

from informers.events import Routing
from mcm_tasks.redisdb import rkey


class Sink(Protocol):
    def enqueue_many(self, items: list[tuple[str, str]]) -> int: ...

    def enqueue_batched(self, items: list[tuple[str, str]]) -> int:
        """Keys that may wait for the batch period (the sinks that record routing record them as any)."""
        ...

    def creation_observed(self, owner_key: str, count: int) -> None: ...

    def deletion_observed(self, owner_key: str, name: str) -> None: ...


def send_routing(sink: Sink, routing: Routing) -> int:
    """Expectations first, then the keys: a MachineSet reconcile woken by this batch must already
    find its expectations lowered. A sink that takes the whole routing at once (``QueueSink``: one
    Redis round trip per batch of events) does it in that order itself."""
    whole = getattr(sink, "deliver_routing", None)
    if whole is not None:
        return int(whole(routing))
    for owner, count in Counter(routing.creations_observed).items():
        sink.creation_observed(owner, count)
    for owner, name in routing.deletions_observed:
        sink.deletion_observed(owner, name)
    now, batched = routing.split()
    return (sink.enqueue_many(now) if now else 0) + (sink.enqueue_batched(batched) if batched else 0)


class QueueSink:
    """The queue contract: coalesced Celery messages per (kind, key), and MachineSet expectations."""

    def __init__(self, client: redis.Redis | None = None) -> None:
        self.client = client

    def enqueue_many(self, items: list[tuple[str, str]]) -> int:
        from mcm_tasks.queue.producer import enqueue_many

        return enqueue_many(items, self.client)

    def deliver_routing(self, routing: Routing) -> int:
        """The expectations, the keys at once and the batched ones, in that order, in one round trip;
        the messages published and the keys batched, as ``send_routing`` counts them."""
        from mcm_tasks.queue.expectations import observed_calls
        from mcm_tasks.queue.producer import enqueue_together
        from mcm_tasks.settings import get_settings

        now, batched = routing.split()
        first = observed_calls(Counter(routing.creations_observed).items(), routing.deletions_observed)
        seconds = get_settings().machine_updates_batch_period
        published = enqueue_together(
            now, batched, seconds, first, self.client, routing.background, floored=True
        )
        return published + (len(batched) if seconds > 0 else 0)

    def enqueue_batched(self, items: list[tuple[str, str]]) -> int:
        from mcm_tasks.queue.producer import enqueue_many_after
        from mcm_tasks.settings import get_settings

        enqueue_many_after(items, get_settings().machine_updates_batch_period, self.client, floored=True)
        return len(items)

    def creation_observed(self, owner_key: str, count: int) -> None:
        from mcm_tasks.queue.expectations import creation_observed

        creation_observed(owner_key, count, self.client)

    def deletion_observed(self, owner_key: str, name: str) -> None:
        from mcm_tasks.queue.expectations import deletion_observed

        deletion_observed(owner_key, name, self.client)


def routed_list_key() -> str:
    return rkey("informer", "routed")


class ListSink:
    """Appends ``"<queue> <key>"`` (and ``"creation <owner> <n>"``, ``"deletion <owner> <name>"``) to
    one Redis list."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.key = routed_list_key()

    def enqueue_many(self, items: list[tuple[str, str]]) -> int:
        if items:
            self.client.rpush(self.key, *(f"{queue} {key}" for queue, key in items))
        return len(items)

    def enqueue_batched(self, items: list[tuple[str, str]]) -> int:
        return self.enqueue_many(items)

    def creation_observed(self, owner_key: str, count: int) -> None:
        self.client.rpush(self.key, f"creation {owner_key} {count}")

    def deletion_observed(self, owner_key: str, name: str) -> None:
        self.client.rpush(self.key, f"deletion {owner_key} {name}")


class MemorySink:
    """Keeps everything in lists (unit tests, the bench hook's dry run)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self.creations: list[tuple[str, int]] = []
        self.deletions: list[tuple[str, str]] = []

    def enqueue_many(self, items: list[tuple[str, str]]) -> int:
        self.items.extend(items)
        return len(items)

    def enqueue_batched(self, items: list[tuple[str, str]]) -> int:
        return self.enqueue_many(items)

    def creation_observed(self, owner_key: str, count: int) -> None:
        self.creations.append((owner_key, count))

    def deletion_observed(self, owner_key: str, name: str) -> None:
        self.deletions.append((owner_key, name))


def make_sink(name: str, client: redis.Redis | None = None) -> Sink:
    if name == "queue":
        return QueueSink()  # the queue contract's own connection (it expects decoded replies)
    if name == "list":
        if client is None:
            raise ValueError("the list sink needs a Redis client")
        return ListSink(client)
    if name == "memory":
        return MemorySink()
    raise ValueError(f"unknown sink {name!r} (queue, list, memory)")
