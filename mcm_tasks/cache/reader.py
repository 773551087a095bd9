"""Untyped reads of the mirror: get, list and by-index, each one Redis round trip.

Index reads run as one Lua script so the set of keys and the objects behind it come from the same
instant: the informer changes an object and its index entries in one MULTI, and a reader never sees
an object under an index value it no longer has.
"""

from __future__ import annotations

import builtins
import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Final, cast

import orjson
import redis

from mcm_tasks.api import Obj
from mcm_tasks.cache import layout
from mcm_tasks.redisdb import get_redis

# HMGET in slices: Lua's unpack() has a limit on how many values it can spread into one call
_BY_INDEX = """
local keys = redis.call('SMEMBERS', KEYS[1])
local out = {}
for i = 1, #keys, 1000 do
  local last = math.min(i + 999, #keys)
  local vals = redis.call('HMGET', KEYS[2], unpack(keys, i, last))
  for j = 1, #vals do
    if vals[j] then out[#out + 1] = vals[j] end
  end
end
return out
"""

# the same, as key, value, key, value…: what the parsed-object cache needs to recognise unchanged objects
_BY_INDEX_ITEMS = """
local keys = redis.call('SMEMBERS', KEYS[1])
local out = {}
for i = 1, #keys, 1000 do
  local last = math.min(i + 999, #keys)
  local vals = redis.call('HMGET', KEYS[2], unpack(keys, i, last))
  for j = 1, #vals do
    if vals[j] then
      out[#out + 1] = keys[i + j - 1]
      out[#out + 1] = vals[j]
    end
  end
end
return out
"""


class Unkept(enum.Enum):
    """``CacheReader.versions_if_synced``'s answer when there are no versions to trust."""

    UNKEPT = "unkept"


UNKEPT: Final = Unkept.UNKEPT


class CacheReader:
    """Reads one Redis; a worker process keeps one (``get_reader()``)."""

    def __init__(self, client: redis.Redis | None = None) -> None:
        self.redis = client if client is not None else get_redis(decode=False)
        self._by_index = self.redis.register_script(_BY_INDEX)
        self._by_index_items = self.redis.register_script(_BY_INDEX_ITEMS)
        #: kinds seen synced inside the current ``remembering_synced`` scope
        self._synced_seen: set[str] = set()
        self._scopes = 0
        self._scope_listed = False
        #: single objects read inside the current scope: (kind, key) → stored JSON (None: absent)
        self._read: dict[tuple[str, str], bytes | None] = {}

    def get(self, kind: str, key: str) -> Obj | None:
        raw = self.get_stored(kind, key)
        return orjson.loads(raw) if raw else None

    def get_stored(self, kind: str, key: str) -> bytes | None:
        """The stored JSON, undecoded. Inside ``remembering_synced`` an object is read from Redis once
        per scope: the pass's later reads of it get the same bytes (a machine's pass reads its Node
        and its class's secrets from several steps)."""
        if self._scopes:
            ident = (kind, key)
            if ident in self._read:
                return self._read[ident]
            found = cast(bytes | None, self.redis.hget(layout.objects_key(kind), key)) or None
            self._read[ident] = found
            return found
        return cast(bytes | None, self.redis.hget(layout.objects_key(kind), key)) or None

    def prefetch(self, wanted: Iterable[tuple[str, str]], exists: Sequence[str] = ()) -> builtins.list[bool]:
        """One round trip for what a pass is about to ask: inside ``remembering_synced``, the synced
        kinds (once per scope) and the single objects ``wanted`` (kind, key) not read yet in the
        scope, whose later ``get`` then costs nothing; and whether each Redis key of ``exists``
        exists (returned in order). A healthy machine's recheck reads its machine, class, node and
        secret and the freeze flag: two round trips instead of six (the secret comes with the class,
        as the worker's last load of the class named it)."""
        listing = bool(self._scopes) and not self._scope_listed
        fetch = [i for i in dict.fromkeys(wanted) if i not in self._read] if self._scopes else []
        if not listing and not fetch and not exists:
            return []
        pipe = self.redis.pipeline(transaction=False)
        if listing:
            pipe.hkeys(layout.synced_key())
        for kind, key in fetch:
            pipe.hget(layout.objects_key(kind), key)
        for key in exists:
            pipe.exists(key)
        replies = pipe.execute()
        if listing:
            self._scope_listed = True
            self._synced_seen.update(k.decode() for k in cast(list[bytes], replies.pop(0)))
        for ident, raw in zip(fetch, replies, strict=False):
            self._read[ident] = cast(bytes | None, raw) or None
        return [bool(found) for found in replies[len(fetch) :]]

    def seed(
        self, synced: Iterable[str | bytes], objects: Mapping[tuple[str, str], str | bytes | None]
    ) -> bool:
        """What was read for this scope elsewhere, in the same instant (the queue contract's BEGIN
        read it ahead: ``registry.ReadAhead``): the synced kinds, and single objects (kind, key) →
        stored JSON (None: absent), as ``prefetch`` would have read them. Outside a scope there is
        nothing to remember them for (False)."""
        if not self._scopes:
            return False
        if not self._scope_listed:
            self._scope_listed = True
            self._synced_seen.update(k.decode() if isinstance(k, bytes) else k for k in synced)
        for ident, raw in objects.items():
            if ident not in self._read:
                self._read[ident] = (raw.encode() if isinstance(raw, str) else raw) or None
        return True

    def get_many(self, kind: str, keys: Iterable[str]) -> builtins.list[Obj]:
        """The objects that exist among ``keys``, in the order asked."""
        wanted = list(keys)
        if not wanted:
            return []
        raws = cast(list[bytes | None], self.redis.hmget(layout.objects_key(kind), wanted))
        return [orjson.loads(raw) for raw in raws if raw]

    def get_many_stored(self, kind: str, keys: Iterable[str]) -> builtins.list[tuple[str, bytes]]:
        """``get_many`` as (key, stored JSON), undecoded."""
        wanted = list(keys)
        if not wanted:
            return []
        raws = cast(list[bytes | None], self.redis.hmget(layout.objects_key(kind), wanted))
        return [(key, raw) for key, raw in zip(wanted, raws, strict=True) if raw]

    def list(self, kind: str) -> builtins.list[Obj]:
        raws = cast(list[bytes], self.redis.hvals(layout.objects_key(kind)))
        return [orjson.loads(raw) for raw in raws]

    def list_stored(self, kind: str) -> dict[str, bytes]:
        """Every object of the kind as key → stored JSON, undecoded."""
        raws = cast(dict[bytes, bytes], self.redis.hgetall(layout.objects_key(kind)))
        return {k.decode(): v for k, v in raws.items()}

    def list_stored_if_synced(self, kind: str) -> dict[str, bytes] | None:
        """``list_stored``, or None when the kind is not synced, both from one instant: for decisions
        that count objects (an empty mirror after Redis lost its data must not read as "none left")."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hexists(layout.synced_key(), kind)
        pipe.hgetall(layout.objects_key(kind))
        synced, raws = pipe.execute()
        if not synced:
            self._synced_seen.discard(kind)
            return None
        return {k.decode(): v for k, v in cast(dict[bytes, bytes], raws).items()}

    def versions_if_synced(self, kind: str) -> dict[bytes, bytes] | Unkept | None:
        """Each object's resourceVersion (key → version, undecoded), or None when the kind is not
        synced, both from one instant; ``UNKEPT`` when the mirror keeps no versions this reader may
        trust for the kind (not a ``layout.VERSIONED_KINDS``, a hash not marked with the current
        sentinel, or one whose entries do not match the objects one by count): list the stored
        objects then."""
        if kind not in layout.VERSIONED_KINDS:
            return UNKEPT
        pipe = self.redis.pipeline(transaction=True)
        pipe.hexists(layout.synced_key(), kind)
        pipe.get(layout.sentinel_key())
        pipe.hlen(layout.objects_key(kind))
        pipe.hgetall(layout.versions_key(kind))
        synced, sentinel, count, found = pipe.execute()
        if not synced:
            self._synced_seen.discard(kind)
            return None
        versions = cast(dict[bytes, bytes], found)
        epoch = versions.pop(layout.VERSIONS_EPOCH.encode(), None)
        if epoch is None or epoch != sentinel or len(versions) != count:
            return UNKEPT
        return versions

    def keys(self, kind: str) -> builtins.list[str]:
        return [k.decode() for k in cast(list[bytes], self.redis.hkeys(layout.objects_key(kind)))]

    def count(self, kind: str) -> int:
        return int(cast(int, self.redis.hlen(layout.objects_key(kind))))

    def index_sizes_if_synced(
        self, kind: str, index: str, values: Sequence[str]
    ) -> builtins.list[int] | None:
        """How many objects are filed under each index value (one ``SCARD`` each, no object read), or
        None when the kind is not synced, both from one instant (``list_stored_if_synced``'s rule)."""
        _check_index(kind, index)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hexists(layout.synced_key(), kind)
        for value in values:
            pipe.scard(layout.index_key(kind, index, value))
        synced, *sizes = pipe.execute()
        if not synced:
            self._synced_seen.discard(kind)
            return None
        return [int(n) for n in sizes]

    def by_index(self, kind: str, index: str, value: str) -> builtins.list[Obj]:
        _check_index(kind, index)
        raws = self._by_index(keys=[layout.index_key(kind, index, value), layout.objects_key(kind)])
        return [orjson.loads(raw) for raw in cast(list[bytes], raws)]

    def index_members(self, kind: str, index: str, value: str) -> builtins.list[str]:
        """The keys of the objects under an index value, without the objects (one SMEMBERS)."""
        _check_index(kind, index)
        members = cast(set[bytes], self.redis.smembers(layout.index_key(kind, index, value)))
        return [k.decode() for k in members]

    def by_index_stored(self, kind: str, index: str, value: str) -> builtins.list[tuple[str, bytes]]:
        """The objects under an index value as (key, stored JSON), undecoded."""
        _check_index(kind, index)
        flat = cast(list[bytes], self._by_index_items(keys=[layout.index_key(kind, index, value),
                                                            layout.objects_key(kind)]))  # fmt: skip
        return [(flat[i].decode(), flat[i + 1]) for i in range(0, len(flat), 2)]

    def synced(self, kind: str) -> bool:
        """Whether the informer has written a complete list of the kind (client-go's ``HasSynced``).

        Inside ``remembering_synced``, the first question reads every synced kind at once, and a yes
        is remembered until the scope ends; a no never is.
        """
        if kind in self._synced_seen:
            return True
        if self._scopes and not self._scope_listed:
            self._scope_listed = True
            listed = cast(list[bytes], self.redis.hkeys(layout.synced_key()))
            self._synced_seen.update(k.decode() for k in listed)
            return kind in self._synced_seen
        synced = bool(self.redis.hexists(layout.synced_key(), kind))
        if synced and self._scopes:
            self._synced_seen.add(kind)
        return synced

    @contextmanager
    def remembering_synced(self) -> Iterator[None]:
        """One synced check per kind for the duration of the scope (one reconcile), instead of one
        Redis round trip before every read: asked that often, it was a noticeable share of task time.
        Likewise one read per single object (``get``, ``get_stored``): the pass sees one version of
        each object it reads, whichever step reads it (lists and index reads are read afresh).

        Not longer than one pass: a remembered yes would outlive Redis losing its data, and reading
        an emptied mirror as complete would have a set create every machine again. Within one pass a
        lagging read is already tolerated (expectations, resourceVersion-guarded writes); a task
        never waits for the mirror within a pass, it requeues.
        """
        self._scopes += 1
        try:
            yield
        finally:
            self._scopes -= 1
            if not self._scopes:
                self._synced_seen.clear()
                self._scope_listed = False
                self._read.clear()


def _check_index(kind: str, index: str) -> None:
    if index not in layout.INDEXES.get(kind, ()):
        raise KeyError(f"{kind} has no index {index!r} (known: {layout.INDEXES.get(kind, ())})")


_readers: dict[tuple[int, int, str], CacheReader] = {}


def get_reader() -> CacheReader:
    """The thread's reader over the settings' Redis: per thread, because a reader's
    ``remembering_synced`` scope is one reconcile pass and a threads-pool worker runs several at
    once; per pid, so forked workers get their own; per URL, so a reader never outlives a change of
    settings, as in tests that configure afresh. Readers share the process's Redis client."""
    import os
    import threading

    from mcm_tasks.settings import get_settings

    ident = (os.getpid(), threading.get_ident(), get_settings().redis_url)
    reader = _readers.get(ident)
    if reader is None:
        reader = _readers[ident] = CacheReader(get_redis(ident[2], decode=False))
    return reader
