"""The single writer's logic: watch events and lists in, store and mirror changes and routing out.

``process`` is pure with respect to I/O: it updates the in-memory store and returns what to write to
Redis (a ``Commit``) and what to enqueue (a ``Routing``); the runner writes, retries on Redis errors
and only then enqueues, so a reconcile never starts before the cache shows the change behind it.

No object content stops it: the writer thread is every controller's only source of events, so an
object it cannot index (a hostile value) is mirrored under the indexes it can be filed in, an event
whose routing fails still reaches its own object's queue, and both come back as ``Problem``s for
the runner to report. Objects routing reads while handling *other* events (owner selectors) are
checked when they arrive, so the cause is reported on the object at fault.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from informers.events import (
    ADDED,
    DELETED,
    MODIFIED,
    Event,
    Problem,
    Routing,
    identity_of,
    machine_queue,
)
from informers.mirror import Change, Commit, encode
from informers.resources import (
    BY_KIND,
    MAX_PROBLEM_LENGTH,
    Obj,
    WatchedResource,
    heartbeat_only,
    key_of,
    resource_version,
)
from informers.routing import route, selector_problem
from informers.store import Store
from mcm_tasks import kinds
from mcm_tasks.kinds import Queue

#: Problem reasons (the informer's Event reasons and metric label)
UNINDEXABLE = "Unindexable"
UNROUTABLE = "Unroutable"
UNUSABLE_SELECTOR = "InvalidSelector"
UNMIRRORABLE = "Unmirrorable"

#: the queue of each kind's own reconcile (a failed routing still wakes the object itself)
_OWN_QUEUE = {
    kinds.MACHINE_SET.mirror: Queue.MACHINE_SET,
    kinds.MACHINE_DEPLOYMENT.mirror: Queue.MACHINE_DEPLOYMENT,
    kinds.MACHINE_CLASS.mirror: Queue.MACHINE_CLASS,
    kinds.SECRET.mirror: Queue.SECRET,
}


def _heartbeat(kind: str, old: Obj | None, new: Obj, same_index: bool) -> bool:
    return kind == kinds.NODE.mirror and old is not None and same_index and heartbeat_only(old, new)


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
    #: objects that could not be fully indexed or routed (mirrored all the same)
    problems: list[Problem] = field(default_factory=list)
    #: per kind, the largest watch lag seen in the batch (``write_lag``), in seconds
    lag: dict[str, float] = field(default_factory=dict)


def write_lag(raw: Mapping[str, Any], now: float) -> float | None:
    """How long after the API server wrote it an object's change reached the informer: now less the
    newest write time the object records. Whole seconds only, so a lag reads up to 1 s high; None
    when the object carries no such time.

    The server stamps each create, update and patch in ``metadata.managedFields[].time``, but not
    the DELETE that marks an object with finalizers (it sets ``metadata.deletionTimestamp`` and
    leaves managedFields alone). The deletion mark counts as a write: without it, the event of a
    machine deleted an hour after its last update read as an hour's lag, and every scale-down put
    the controllers in lag mode (live lists of the whole set on every pass). A deletion mark in the
    future (a pod's grace period) only says the change is fresh: lag 0."""
    meta = raw.get("metadata") or {}
    entries = list(meta.get("managedFields") or [])
    if meta.get("deletionTimestamp"):
        entries.append({"time": meta["deletionTimestamp"]})
    newest: float | None = None
    for entry in entries:
        stamp = entry.get("time") if isinstance(entry, Mapping) else None
        if not isinstance(stamp, str):
            continue
        try:
            when = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
        newest = when if newest is None else max(newest, when)
    return None if newest is None else max(0.0, now - newest)


class Processor:
    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def process(self, items: Iterable[Item], into: Outcome | None = None) -> Outcome:
        """The outcome of a batch; ``into``: one that earlier items of the same batch began."""
        out = into if into is not None else Outcome()
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
        old_index = self.store.index_values(kind, key)
        version = resource_version(new)
        unchanged = old is not None and resource_version(old) == version
        if unchanged and not announce_added:
            return
        if not unchanged and not announce_added:
            lag = write_lag(raw, self.clock())
            if lag is not None and lag > out.lag.get(kind, -1.0):
                out.lag[kind] = lag
        encoded = b""
        if not unchanged:
            try:
                encoded = encode(stored)
            except (RecursionError, TypeError, ValueError) as err:
                # not mirrored (workers cannot see it, as if it did not exist); said on the object
                message = f"cannot be mirrored: {type(err).__name__}: {err}"[:MAX_PROBLEM_LENGTH]
                out.problems.append(Problem(kind, key, identity_of(raw), UNMIRRORABLE, message))
                return
        if unchanged:
            self.store.put(kind, key, new, old_index)
        else:
            new_index, index_problems = res.indexed(new)
            self.store.put(kind, key, new, new_index)
            # a Node's status heartbeat (``heartbeat_only``) routed on its own: when it wakes nothing
            # its mirror write may wait (``Change.lazy``), since nothing reads the heartbeat time to
            # decide at once; one that wakes something (a machine whose conditions lag its node's) is
            # written at once, so that what it wakes finds it
            beat = None
            if _heartbeat(kind, old, new, old_index == new_index) and not announce_added:
                beat = self._route(Event(kind, MODIFIED, old, new), key, raw, Routing(), out)
            lazy = beat is not None and not beat
            out.commit.add(Change(kind, key, encoded, old_index, new_index, lazy, version))
            self._check(res, key, raw, index_problems, out)
            if beat is not None:
                out.routing.merge(beat)
                return
        if announce_added:
            routed = self._route(Event(kind, ADDED, None, new), key, raw, Routing(), out)
            if old is not None:
                routed.creations_observed.clear()  # seen by the previous leader already
            out.routing.merge(routed)
        else:
            event = Event(kind, MODIFIED if old is not None else ADDED, old, new)
            self._route(event, key, raw, out.routing, out)

    def _check(self, res: WatchedResource, key: str, raw: Obj, problems: list[str], out: Outcome) -> None:
        """Report what of a new object version the informer cannot use."""
        for message in problems:
            out.problems.append(Problem(res.kind, key, identity_of(raw), UNINDEXABLE, message))
        if res.kind in (kinds.MACHINE_SET.mirror, kinds.MACHINE_DEPLOYMENT.mirror):
            problem = selector_problem(raw)
            if problem is not None:
                message = f"its selector selects no orphan until fixed: {problem}"
                out.problems.append(Problem(res.kind, key, identity_of(raw), UNUSABLE_SELECTOR, message))

    def _route(self, event: Event, key: str, raw: Obj | None, into: Routing, out: Outcome) -> Routing:
        """Route one event; if routing fails on the object's content, the object's own key is still
        enqueued (its reconcile reports what is wrong) and the failure becomes a Problem."""
        try:
            return route(event, self.store, into)
        except Exception as err:  # any content the schema lets through must not end the watch loop
            if event.kind == kinds.MACHINE.mirror:
                into.add(
                    Queue.MACHINE_TERMINATION if event.type == DELETED else machine_queue(event.obj), key
                )
            elif event.kind in _OWN_QUEUE:
                into.add(_OWN_QUEUE[event.kind], key)
            message = f"routing of a {event.type} event failed: {type(err).__name__}: {err}"
            message = message[:MAX_PROBLEM_LENGTH]
            out.problems.append(Problem(event.kind, key, identity_of(raw or event.obj), UNROUTABLE, message))
            return into

    def _delete(self, res: WatchedResource, key: str, final: Obj | None, out: Outcome) -> None:
        filed = self.store.index_values(res.kind, key)
        old = self.store.delete(res.kind, key)
        if old is None and final is None:
            return
        out.commit.add(Change(res.kind, key, None, filed, {}))
        gone = final if final is not None else old
        self._route(Event(res.kind, DELETED, gone, None), key, gone, out.routing, out)

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
