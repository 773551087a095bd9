"""Objects, the global resourceVersion counter, the retained event history and list snapshots.

Like etcd, every write takes the next revision of one counter, and every write is one event in an
ordered history that watches replay from. Stored objects are never mutated after commit: each
entry keeps its dict and its serialized bytes, so LIST joins bytes and a watch event is encoded
once for every watcher. Everything runs on one event loop, so a read-check-commit sequence without
an ``await`` in between is an atomic compare-and-swap.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def dumps(obj: Any) -> bytes:
    """orjson stops at 255 levels of nesting; the real API server stores deeper objects, so those go
    through the standard library."""
    try:
        # orjson hands back its whole working buffer (4 KiB and up, whatever the output's size): a
        # copy of exactly the output keeps stored objects and events at their serialized size
        return bytes(memoryview(orjson.dumps(obj)))
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def loads(raw: bytes | str) -> Any:
    return orjson.loads(raw)


@dataclass(slots=True)
class Entry:
    obj: dict[str, Any]
    raw: bytes

    def clone(self) -> dict[str, Any]:
        """A private mutable copy (orjson round trip: faster than deepcopy)."""
        copied: dict[str, Any] = orjson.loads(self.raw)
        return copied

    @property
    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = self.obj["metadata"]
        return meta


@dataclass(slots=True)
class Event:
    rv: int
    storage: str
    type: str
    namespace: str
    entry: Entry
    old: Entry | None
    lines: dict[str, bytes] = field(default_factory=dict)

    def line(self, event_type: str) -> bytes:
        """The watch line for this event, encoded once and shared by all watchers."""
        cached = self.lines.get(event_type)
        if cached is None:
            cached = b'{"type":"' + event_type.encode() + b'","object":' + self.entry.raw + b"}\n"
            self.lines[event_type] = cached
        return cached


Key = tuple[str, str, str]  # storage, namespace, name
# Events kept for watches to resume from: like etcd's compaction window, bounded so a busy server's
# memory stays flat; a watch resuming from before it gets 410 Expired and relists, as clients must.
DEFAULT_HISTORY_WINDOW = 20_000


class Store:
    def __init__(self, history_window: int = DEFAULT_HISTORY_WINDOW) -> None:
        self.rv = 0
        self.data: dict[str, dict[str, dict[str, Entry]]] = {}
        self.history: list[Event] = []
        self.history_window = max(1, history_window)
        self.by_uid: dict[str, Key] = {}
        self.dependents: dict[str, set[Key]] = {}
        self.listeners: list[Callable[[Event], None]] = []
        #: parked watchers by what they watch: (storage, namespace), None for all of either
        self._waiters: dict[tuple[str | None, str | None], list[asyncio.Future[None]]] = {}
        self._snapshots: OrderedDict[str, tuple[float, list[Entry]]] = OrderedDict()

    # --- reads -------------------------------------------------------------------------------

    def get(self, storage: str, namespace: str, name: str) -> Entry | None:
        return self.data.get(storage, {}).get(namespace, {}).get(name)

    def get_by_uid(self, uid: str) -> Entry | None:
        key = self.by_uid.get(uid)
        return self.get(*key) if key else None

    def iter(self, storage: str, namespace: str | None = None) -> Iterator[Entry]:
        spaces = self.data.get(storage, {})
        if namespace is not None:
            yield from spaces.get(namespace, {}).values()
            return
        for objs in spaces.values():
            yield from objs.values()

    def sorted_entries(self, storage: str, namespace: str | None = None) -> list[Entry]:
        spaces = self.data.get(storage, {})
        out: list[Entry] = []
        names = [namespace] if namespace is not None else sorted(spaces)
        for ns in names:
            objs = spaces.get(ns, {})
            out.extend(objs[n] for n in sorted(objs))
        return out

    def count_in_namespace(self, namespace: str, storages: list[str]) -> int:
        return sum(len(self.data.get(s, {}).get(namespace, {})) for s in storages)

    # --- writes ------------------------------------------------------------------------------

    def commit(self, storage: str, event_type: str, obj: dict[str, Any], old: Entry | None) -> Entry:
        """Write (or, for DELETED, remove) one object at the next revision and record the event."""
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        entry = Entry(obj, dumps(obj))
        namespace = meta.get("namespace", "")
        name = meta["name"]
        key = (storage, namespace, name)
        uid = meta.get("uid", "")
        if event_type == DELETED:
            spaces = self.data.get(storage, {})
            objs = spaces.get(namespace, {})
            objs.pop(name, None)
            if not objs:
                spaces.pop(namespace, None)
            self.by_uid.pop(uid, None)
            self._index_owners(key, old.obj if old else None, None)
        else:
            self.data.setdefault(storage, {}).setdefault(namespace, {})[name] = entry
            self.by_uid[uid] = key
            self._index_owners(key, old.obj if old else None, obj)
        event = Event(self.rv, storage, event_type, namespace, entry, old)
        self.history.append(event)
        if len(self.history) > self.history_window + max(1000, self.history_window // 4):
            del self.history[: len(self.history) - self.history_window]
        if self._waiters:  # only the watchers this event concerns (a seed's 50 namespaces each watch)
            concerned: tuple[tuple[str | None, str | None], ...] = (
                (event.storage, event.namespace),
                (event.storage, None),
                (None, None),
            )
            for watched in concerned:
                for waiter in self._waiters.pop(watched, ()):
                    if not waiter.done():
                        waiter.set_result(None)
        for listener in self.listeners:
            listener(event)
        return entry

    def _index_owners(self, key: Key, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        before = {r.get("uid", "") for r in (old or {}).get("metadata", {}).get("ownerReferences") or []}
        after = {r.get("uid", "") for r in (new or {}).get("metadata", {}).get("ownerReferences") or []}
        for uid in before - after:
            deps = self.dependents.get(uid)
            if deps is not None:
                deps.discard(key)
                if not deps:
                    del self.dependents[uid]
        for uid in after:
            self.dependents.setdefault(uid, set()).add(key)

    # --- history and change notification -----------------------------------------------------

    @property
    def oldest_rv(self) -> int:
        """The oldest revision a watch can still start from (events after it are all retained)."""
        if len(self.history) > self.history_window:
            return self.history[len(self.history) - self.history_window].rv - 1
        return self.history[0].rv - 1 if self.history else self.rv

    def events_after(self, rv: int) -> list[Event] | None:
        """Events with revision > rv, or None when some of them are no longer retained."""
        if rv < self.oldest_rv:
            return None
        if not self.history or rv >= self.history[-1].rv:
            return []
        base = self.history[0].rv
        return self.history[rv + 1 - base :]

    def wake_on_commit(
        self, waiter: asyncio.Future[None], storage: str | None = None, namespace: str | None = None
    ) -> None:
        """Resolve ``waiter`` at the next commit in ``storage`` and ``namespace`` (None: any), as a
        watcher parks between events. Waking every watcher at every commit made one busy namespace's
        writes cost a wake-up of every other namespace's watches (kube-apiserver's watch cache
        dispatches by key); a watcher not woken keeps its place through its timer (``WAKE_AT_LEAST``)."""
        self._waiters.setdefault((storage, namespace), []).append(waiter)

    # --- consistent list snapshots for limit/continue ----------------------------------------

    def save_snapshot(self, token_id: str, entries: list[Entry]) -> None:
        now = time.monotonic()
        self._snapshots[token_id] = (now, entries)
        while self._snapshots and (
            len(self._snapshots) > 64 or next(iter(self._snapshots.values()))[0] < now - 300
        ):
            self._snapshots.popitem(last=False)

    def snapshot(self, token_id: str) -> list[Entry] | None:
        found = self._snapshots.get(token_id)
        return found[1] if found else None
