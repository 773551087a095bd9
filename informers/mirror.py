"""The Redis side of the mirror: one writer applying object changes with their index entries.

Each change (the object's JSON or its removal, plus the index values it leaves and enters) goes into
a MULTI with the rest of its batch, so a reader sees an object and its index entries change together.
Very large batches (the first list of 100k pods) are cut into chunks so Redis is never blocked long.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
import redis

from mcm_tasks.cache import layout

CHUNK = 500


@dataclass
class Change:
    kind: str
    key: str
    #: the stored JSON, or None to remove the object
    stored: bytes | None
    old_index: dict[str, list[str]] = field(default_factory=dict)
    new_index: dict[str, list[str]] = field(default_factory=dict)
    #: may wait for the writer's next commit (at most ``SENTINEL_EVERY``): nothing was routed on it
    #: and nothing routing or the indexes read moved (a Node's status heartbeat)
    lazy: bool = False
    #: the object's resourceVersion (kept beside it for ``layout.VERSIONED_KINDS``)
    version: str = ""


@dataclass
class Commit:
    """Everything one batch writes: object changes and kinds whose list completed (kind → rv)."""

    changes: list[Change] = field(default_factory=list)
    synced: dict[str, str] = field(default_factory=dict)
    sentinel: str | None = None
    #: (kind, key) → its change's place in ``changes`` (what ``add`` merged so far)
    _at: dict[tuple[str, str], int] = field(default_factory=dict, repr=False, compare=False)
    #: how many of ``changes`` are not lazy (kept by ``add``): the writer asks ``urgent`` after
    #: every batch while heartbeats pile up for a sentinel period, so it must not scan them
    _eager: int = field(default=0, repr=False, compare=False)

    def __bool__(self) -> bool:
        return bool(self.changes or self.synced or self.sentinel)

    @property
    def urgent(self) -> bool:
        """Whether it must be written now; lazy changes alone may wait for the next commit."""
        return bool(self.synced or self.sentinel or self._eager)

    def absorb(self, later: Commit) -> None:
        """Take a later batch's commit in: the changes held back here are written with it."""
        for change in later.changes:
            self.add(change)
        self.synced.update(later.synced)
        if later.sentinel is not None:
            self.sentinel = later.sentinel

    def add(self, change: Change) -> None:
        """A change of an object already changed in this commit replaces that one: the object's last
        state, its index entries moved from before the first change to after the last. A batch
        often holds two versions of one object (a pass's status write and the next pass's, within
        the writer's linger), and the earlier one would be written only to be overwritten."""
        ident = (change.kind, change.key)
        at = self._at.get(ident)
        if at is None:
            self._at[ident] = len(self.changes)
            self.changes.append(change)
            self._eager += not change.lazy
            return
        first = self.changes[at]
        stored, lazy = change.stored, first.lazy and change.lazy
        self._eager += first.lazy and not lazy
        self.changes[at] = Change(
            change.kind, change.key, stored, first.old_index, change.new_index, lazy, change.version
        )


class Mirror:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        #: the commit counter as this writer last left it (None: not known yet)
        self._commits: int | None = None

    def write(self, commit: Commit) -> str | None:
        """Apply a commit; returns the sentinel as it stands afterwards. The writer compares it with
        the one it set: gone or different means Redis lost its data (or another writer took over).

        Each commit also counts itself in Redis. A count that does not follow on from this writer's
        last one means writes were lost while the sentinel survived (a Sentinel failover promotes a
        replica that missed the master's last writes; a restart from an old snapshot): reported as a
        lost sentinel (None), so the writer re-lists and rebuilds what went missing."""
        changes = commit.changes
        chunks = [changes[i : i + CHUNK] for i in range(0, len(changes), CHUNK)] or [[]]
        sentinel: str | None = None
        for n, chunk in enumerate(chunks):
            # MULTI/EXEC keeps an object and its index entries together; a commit with nothing to
            # write (the idle writer's sentinel check) needs none: two commands instead of four
            pipe = self.redis.pipeline(transaction=bool(chunk or commit.synced or commit.sentinel))
            for change in chunk:
                _queue_change(pipe, change)
            last = n == len(chunks) - 1
            if last:
                if commit.synced:
                    pipe.hset(layout.synced_key(), mapping=cast(Any, dict(commit.synced)))
                if commit.sentinel is not None:
                    pipe.set(layout.sentinel_key(), commit.sentinel)
                    # the versions hashes are complete under this sentinel (``rebuild_versions`` at the
                    # start of the leadership, every change since beside its object)
                    for kind in layout.VERSIONED_KINDS:
                        pipe.hset(layout.versions_key(kind), layout.VERSIONS_EPOCH, commit.sentinel)
                pipe.get(layout.sentinel_key())
                pipe.incr(layout.sentinel_key() + ":commits")
            results = pipe.execute()
            if last:
                sentinel = _text(results[-2])
                count = int(results[-1])
                if self._commits is not None and count != self._commits + 1:
                    sentinel = None
                self._commits = count
        return sentinel

    def sentinel(self) -> str | None:
        return _text(self.redis.get(layout.sentinel_key()))

    def scan(self, kind: str, count: int = 1000) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every stored object of a kind (to seed a new leader's memory from what is already there)."""
        for key, raw in self.redis.hscan_iter(layout.objects_key(kind), count=count):
            name = key.decode() if isinstance(key, bytes) else str(key)
            yield name, orjson.loads(cast(bytes, raw))

    def rebuild_versions(self, kind: str, versions: list[tuple[str, str]]) -> None:
        """A new leader's versions hash of ``kind``, from the objects it found mirrored: what an
        earlier leader left may be missing or stale (a release that kept none), and readers trust the
        hash only once this leader's sentinel marks it. Its epoch is dropped until then."""
        if kind not in layout.VERSIONED_KINDS:
            return
        key = layout.versions_key(kind)
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(key)
        for i in range(0, len(versions), CHUNK * 10):
            pipe.hset(key, mapping=dict(versions[i : i + CHUNK * 10]))
        pipe.execute()

    def forget_synced(self) -> None:
        self.redis.delete(layout.synced_key())


def _queue_change(pipe: Any, change: Change) -> None:
    objects = layout.objects_key(change.kind)
    versioned = change.kind in layout.VERSIONED_KINDS
    if change.stored is None:
        pipe.hdel(objects, change.key)
        if versioned:
            pipe.hdel(layout.versions_key(change.kind), change.key)
    else:
        pipe.hset(objects, change.key, change.stored)
        if versioned:
            pipe.hset(layout.versions_key(change.kind), change.key, change.version)
    for index in change.old_index.keys() | change.new_index.keys():
        before, after = change.old_index.get(index, []), change.new_index.get(index, [])
        if before == after:
            continue
        for value in before:
            if value not in after:
                pipe.srem(layout.index_key(change.kind, index, value), change.key)
        for value in after:
            if value not in before:
                pipe.sadd(layout.index_key(change.kind, index, value), change.key)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def encode(obj: dict[str, Any]) -> bytes:
    """The stored JSON. orjson refuses objects nested deeper than 255 levels, which the API server
    accepts: those go through the standard library (about a thousand levels; deeper raises
    RecursionError, which the processor reports as an object it cannot mirror)."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
