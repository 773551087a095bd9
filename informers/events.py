"""The vocabulary of routing: events, what they ask for, and the read-only view routing may use."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from informers.resources import meta
from mcm_tasks import kinds
from mcm_tasks.api import Obj
from mcm_tasks.kinds import Queue

#: the longest key of an object: namespace (63) / name (253)
MAX_KEY_LENGTH = 317

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"


class View(Protocol):
    """What routing may read: the informer's store, after the event was applied to it."""

    #: the control namespace, where the Machines are
    namespace: str

    def get(self, kind: str, key: str) -> Obj | None: ...

    def by_index(self, kind: str, index: str, value: str) -> list[Obj]: ...

    def index_keys(self, kind: str, index: str, value: str) -> set[str]: ...

    def values(self, kind: str) -> Iterable[Obj]: ...


@dataclass(frozen=True)
class Event:
    """A watch event on a kind, with the object before and after as the informer remembers them."""

    kind: str
    type: str
    old: Obj | None = None
    new: Obj | None = None

    @property
    def obj(self) -> Obj:
        found = self.new if self.new is not None else self.old
        if found is None:
            raise ValueError("an event carries at least one object")
        return found


@dataclass
class Routing:
    """What events ask for, in arrival order and without duplicates."""

    enqueue: dict[tuple[str, str], None] = field(default_factory=dict)
    #: the entries of ``enqueue`` that may wait for the batch period (``--machine-updates-batch-period``)
    batched: set[tuple[str, str]] = field(default_factory=set)
    #: MachineSet keys that saw one of their machines created
    creations_observed: list[str] = field(default_factory=list)
    #: (MachineSet key, machine name) of deletions seen
    deletions_observed: dict[tuple[str, str], None] = field(default_factory=dict)
    #: a resync's keys, not an event's: queued behind user-facing work (``enqueue_together``)
    background: bool = False

    def add(self, queue: str, key: str | None, *, batched: bool = False) -> None:
        """``batched``: a child's change waking its owner, which may wait for more of them; an
        entry asked for at once anywhere in the batch is sent at once."""
        if not key or len(key) > MAX_KEY_LENGTH:
            return  # no object has such a key (a hostile reference): the queue would refuse it
        item = (queue, key)
        if batched and item not in self.enqueue:
            self.batched.add(item)
        elif not batched:
            self.batched.discard(item)
        self.enqueue[item] = None

    def items(self) -> list[tuple[str, str]]:
        return list(self.enqueue)

    def split(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(at once, after the batch period)."""
        now = [item for item in self.enqueue if item not in self.batched]
        return now, [item for item in self.enqueue if item in self.batched]

    def merge(self, other: Routing) -> None:
        for item in other.enqueue:
            self.add(*item, batched=item in other.batched)
        self.creations_observed.extend(other.creations_observed)
        self.deletions_observed.update(other.deletions_observed)

    def __bool__(self) -> bool:
        return bool(self.enqueue or self.creations_observed or self.deletions_observed)


@dataclass(frozen=True)
class Problem:
    """An object the informer could not fully index or route, and why (reported by
    ``informers.problems``: a log line, a metric, a Warning Event on the object)."""

    kind: str
    key: str
    #: the object's identity (apiVersion, kind, metadata name/namespace/uid/resourceVersion), no content
    identity: Obj
    reason: str
    message: str


def identity_of(obj: Obj | None) -> Obj:
    """What an Event needs of an object, and nothing else (never its spec or data)."""
    m = meta(obj)
    return {
        "apiVersion": (obj or {}).get("apiVersion"),
        "kind": (obj or {}).get("kind"),
        "metadata": {k: m.get(k) for k in ("name", "namespace", "uid", "resourceVersion") if m.get(k)},
    }


def is_deleting(obj: Obj | None) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def labels_of(obj: Obj | None) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def annotations_of(obj: Obj | None) -> dict[str, str]:
    return dict(meta(obj).get("annotations") or {})


def machine_queue(machine: Obj) -> Queue:
    """Machines being deleted go to their own queue, so long drains cannot starve creations."""
    return kinds.machine_queue(is_deleting(machine))
