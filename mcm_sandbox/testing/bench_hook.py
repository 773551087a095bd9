"""The informer's write path fed with synthetic watch events, for the queue bench.

``mirror_and_enqueue(client, items)`` turns each ``("machine", key)`` into a Machine spec change
(a watch MODIFIED event with a new generation) and sends the batch down exactly the path a real
watch event takes — in-memory store, one Redis MULTI with the object and its index entries, routing,
one ``enqueue_many`` — so the bench's "event → mirror → enqueue → lock → cache read" includes the
informer's share. Items of other kinds are enqueued as given. The reconciler then finds the machine
with ``mcm_tasks.cache.get_reader().get("machines", key)``.

``enqueue_rate(client, events, keys)`` measures that path alone, in events per second.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis

from informers.events import MODIFIED
from informers.mirror import Mirror
from informers.processor import Processor, WatchEvent
from informers.runner import BATCH_MAX
from informers.sink import QueueSink, Sink, send_routing
from informers.store import Store
from mcm_sandbox.testing import fixtures
from mcm_tasks import kinds
from mcm_tasks.api import Obj
from mcm_tasks.cache import layout
from mcm_tasks.kinds import Queue


class SyntheticInformer:
    """One writer over one Redis; remembers each synthetic machine so every push is an UPDATE."""

    def __init__(self, client: redis.Redis, sink: Sink | None = None, namespace: str = "") -> None:
        self.namespace = namespace
        self.processor = Processor(Store(namespace or "default"))
        self.mirror = Mirror(client)
        self.sink = sink if sink is not None else QueueSink(client)
        self.generations: dict[str, int] = {}
        self.version = 0

    def push(self, items: Sequence[tuple[str, str]]) -> int:
        """One event per item through store → mirror → routing → enqueue; messages published."""
        events: list[WatchEvent] = []
        passthrough: list[tuple[str, str]] = []
        for kind, key in items:
            if kind == Queue.MACHINE:
                events.append(WatchEvent(kinds.MACHINE.mirror, MODIFIED, self._changed_machine(key)))
            else:
                passthrough.append((kind, key))
        outcome = self.processor.process(events)
        self.mirror.write(outcome.commit)
        for item in passthrough:
            outcome.routing.add(*item)
        return send_routing(self.sink, outcome.routing)

    def _changed_machine(self, key: str) -> Obj:
        namespace, name = layout.split_key(key)
        generation = self.generations.get(key)
        if generation is None:  # known from "before the bench": its first event is an update
            self.processor.seed(kinds.MACHINE.mirror, [(key, self._machine(name, namespace, 0))])
            generation = 0
        self.generations[key] = generation + 1
        return self._machine(name, namespace, generation + 1)

    def _machine(self, name: str, namespace: str | None, generation: int) -> Obj:
        self.version += 1
        obj = fixtures.machine(name, rv=str(self.version), generation=generation, namespace=namespace or "")
        del obj["spec"]["class"]  # no class: the event routes to the machine queue only
        return obj


_instances: dict[int, SyntheticInformer] = {}


def mirror_and_enqueue(
    client: redis.Redis, items: Sequence[tuple[str, str]], sink: Sink | None = None
) -> int:
    """The bench's hook: mirror and route one synthetic event per item (one writer per client)."""
    informer = _instances.get(id(client))
    if informer is None or (sink is not None and informer.sink is not sink):
        informer = _instances[id(client)] = SyntheticInformer(client, sink)
    return informer.push(items)


def enqueue_rate(
    client: redis.Redis,
    events: int = 30_000,
    keys: int = 3_000,
    batch: int = BATCH_MAX,
    sink: Sink | None = None,
) -> float:
    """Events per second through the informer's write path, in batches as the writer takes them
    under load (``BATCH_MAX``), over ``keys`` machines (so the queue coalesces repeats)."""
    informer = SyntheticInformer(client, sink)
    names = [f"bench-informer-{i}" for i in range(keys)]
    informer.push([(Queue.MACHINE, name) for name in names])  # warm: every machine known and mirrored
    started = time.perf_counter()
    for start in range(0, events, batch):
        informer.push([(Queue.MACHINE, names[i % keys]) for i in range(start, min(events, start + batch))])
    return events / (time.perf_counter() - started)
