"""The single writer's logic: watch events and lists in, store and mirror changes and routing out.

``process`` is pure with respect to I/O: it updates the in-memory store and returns what to write to
Redis (a ``Commit``) and what to enqueue (a ``Routing``); the runner writes, retries on Redis errors
and only then enqueues, so a reconcile never starts before the cache shows the change behind it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from informers.events import ADDED, DELETED, MODIFIED, Event, Routing
from informers.mirror import Change, Commit, encode
from informers.resources import BY_KIND, Obj, WatchedResource, key_of, resource_version
from informers.routing import route
from informers.store import Store


@dataclass(frozen=True)
class WatchEvent:
    kind: str
    type: str
    obj: Obj


@dataclass(frozen=True)
class Relisted:
    """A complete list of a kind. ``initial``: the first list since this process started leading (or
    since Redis lost its data): every object is announced as ADDED, as client-go does at start."""

    kind: str
    objects: Sequence[Obj]
    resource_version: str
    initial: bool = False


Item = WatchEvent | Relisted


@dataclass
class Outcome:
    commit: Commit = field(default_factory=Commit)
    routing: Routing = field(default_factory=Routing)
    #: kinds whose list completed in this batch
    listed: list[str] = field(default_factory=list)
    events: int = 0


class Processor:
    def __init__(self, store: Store) -> None:
        self.store = store

    def process(self, items: Iterable[Item]) -> Outcome:
        out = Outcome()
        for item in items:
            if isinstance(item, WatchEvent):
                self._event(item.kind, item.type, item.obj, out)
            else:
                self._relisted(item, out)
        return out

    def seed(self, kind: str, stored: Iterable[tuple[str, Obj]]) -> int:
        """Fill memory from what the mirror already holds (a new leader), so that a first list can
        tell what vanished and which index entries to take back."""
        res = BY_KIND[kind]
        n = 0
        for key, obj in stored:
            self.store.put(kind, key, res.remember(obj))
            n += 1
        return n

    # --- one object ---------------------------------------------------------------------------------

    def _event(self, kind: str, type_: str, raw: Obj, out: Outcome, *, announce_added: bool = False) -> None:
        res = BY_KIND[kind]
        key = key_of(raw)
        out.events += 1
        if type_ == DELETED:
            final = res.remember(res.stored(raw))
            self._delete(res, key, final, out)
            return
        stored = res.stored(raw)
        new = res.remember(stored)
        old = self.store.get(kind, key)
        unchanged = old is not None and resource_version(old) == resource_version(new)
        if unchanged and not announce_added:
            return
        self.store.put(kind, key, new)
        if not unchanged:
            out.commit.changes.append(
                Change(
                    kind,
                    key,
                    encode(stored),
                    res.index_values(old),
                    res.index_values(new),
                )
            )
        if announce_added:
            routed = route(Event(kind, ADDED, None, new), self.store)
            if old is not None:
                routed.creations_observed.clear()  # seen by the previous leader already
            out.routing.merge(routed)
        else:
            route(Event(kind, MODIFIED if old is not None else ADDED, old, new), self.store, out.routing)

    def _delete(self, res: WatchedResource, key: str, final: Obj | None, out: Outcome) -> None:
        old = self.store.delete(res.kind, key)
        if old is None and final is None:
            return
        out.commit.changes.append(Change(res.kind, key, None, res.index_values(old), {}))
        route(Event(res.kind, DELETED, final if final is not None else old, None), self.store, out.routing)

    # --- a whole list -------------------------------------------------------------------------------

    def _relisted(self, item: Relisted, out: Outcome) -> None:
        """client-go's Replace: listed objects are added or updated, objects that vanished are deleted
        (their deletion routed like a watched one, from the last state seen)."""
        res = BY_KIND[item.kind]
        listed: set[str] = set()
        for raw in item.objects:
            listed.add(key_of(raw))
            self._event(item.kind, ADDED, raw, out, announce_added=item.initial)
        for key in self.store.keys(item.kind):
            if key not in listed:
                self._delete(res, key, None, out)
        out.commit.synced[item.kind] = item.resource_version
        out.listed.append(item.kind)
