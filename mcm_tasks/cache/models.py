"""Parsed objects kept per process, reused while their stored JSON is unchanged.

Parsing (JSON, then pydantic with timestamps) costs far more than reading: at a thousand machines it is
most of a MachineSet reconcile, and the set is reconciled again after every machine status write. The
mirror's stored bytes identify a version exactly (the informer writes a new value on every change), so
an entry is reused only when the bytes Redis returns now are equal to the ones it was parsed from.

The objects handed out are shared between every reader of the process: callers must treat them as
read-only (copy before changing anything). A copy (``model_copy(deep=True)``) costs more than a fresh
parse, which is why sharing is opt-in (``Lister.shared``) and the plain listers still parse afresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from mcm_tasks.cache import layout

Parse = Callable[[Any], Any]
B = TypeVar("B", bound=BaseModel)


class Unreadable(ValueError):
    """An object the API server accepted that our model refuses (content its schema does not type).

    Carries the object's identity (never its content) and what is wrong, field by field. Listers leave
    such objects out of lists and raise this for a single get; the reconcilers answer it with a Warning
    Event on the object (``controllers.problems_io``) instead of failing, since retrying cannot help.
    """

    def __init__(self, kind: str, raw: Mapping[str, Any], problem: str) -> None:
        found = raw.get("metadata")
        meta: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        self.kind = kind
        self.identity: dict[str, Any] = {
            "apiVersion": raw.get("apiVersion"),
            "kind": raw.get("kind") or kind,
            "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")},
        }
        self.problem = problem
        name = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        super().__init__(f"{kind} {name} cannot be read: {problem}")


#: deeper than any MCM object needs (its deepest fields are a dozen levels down), and well below where
#: pydantic stops serialising (about 255): a model read from deeper content could not be written back
MAX_DEPTH = 100


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests dicts and lists more than ``limit`` levels: breadth first, containers
    only, stopping at the first level with none (a few microseconds for a Machine)."""
    if type(value) is not dict and type(value) is not list:
        return False
    level: list[Any] = [value]
    for _ in range(limit):
        deeper: list[Any] = []
        for container in level:
            for child in container.values() if type(container) is dict else container:
                if type(child) is dict or type(child) is list:
                    deeper.append(child)
        if not deeper:
            return False
        level = deeper
    return True


def parse_object(model: type[B], raw: Mapping[str, Any]) -> B:
    """``model.model_validate(raw)``, raising ``Unreadable`` for content the model refuses, or nested so
    deep that the model could not be written back."""
    if too_deep(raw):
        raise Unreadable(model.__name__, raw, f"nested deeper than {MAX_DEPTH} levels")
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        from mcm_tasks.api.validation import parse_problem

        raise Unreadable(model.__name__, raw, parse_problem(err)) from None


_parsers: dict[type[BaseModel], Parse] = {}


def parser(model: type[BaseModel]) -> Parse:
    """One parse function per model (the parsed-object cache keys its tables by it)."""
    found = _parsers.get(model)
    if found is None:

        def parse(raw: Any) -> Any:
            return parse_object(model, raw)

        found = _parsers[model] = parse
    return found


#: a derived value whose name starts so depends only on the object's spec: it is kept for the next
#: version of the object while its uid and ``metadata.generation`` stay the same (the API server
#: raises the generation with every change of the spec; a status write or a label leaves it)
SPEC_SCOPED = "spec:"

#: a table drops the entries not read during its last this-many reads: a full list (``every``) drops
#: the objects no longer stored, but reads of some objects (``some``: by index, by keys) cannot tell
#: a deleted object from one not asked for, so without this a worker would keep every node it ever read
SWEEP_EVERY = 20_000


class ParsedCache:
    """(kind, parser) → object key → (stored bytes, parsed object)."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, Parse], dict[str, tuple[bytes, Any]]] = {}
        #: per table: the keys read since its last sweep, and how many reads that was
        self._read: dict[tuple[str, Parse], tuple[set[str], list[int]]] = {}
        #: per table, the version index of ``every_versioned``: stored key (bytes) → (resourceVersion
        #: bytes, the object parsed from that version)
        self._versions: dict[tuple[str, Parse], dict[bytes, tuple[bytes, Any]]] = {}
        #: id of a cached object → (the object, name → value derived from it); see ``derived``
        self._derived: dict[int, tuple[Any, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def _table(self, kind: str, parse: Parse) -> dict[str, tuple[bytes, Any]]:
        table = self._tables.get((kind, parse))
        if table is None:
            with self._lock:
                table = self._tables.setdefault((kind, parse), {})
        return table

    def one(self, kind: str, parse: Parse, key: str, raw: bytes) -> Any:
        """The parsed object stored as ``raw`` under ``key``; parsed only when the bytes changed."""
        table = self._table(kind, parse)
        self._note_read(kind, parse, key)
        hit = table.get(key)
        if hit is not None and hit[0] == raw:
            return hit[1]
        parsed = parse(orjson.loads(raw))
        table[key] = (raw, parsed)
        if hit is not None:
            self._inherit(hit[1], parsed)
        return parsed

    def _inherit(self, old: Any, new: Any) -> None:
        """Drop what was derived from ``old``, the version ``new`` replaces, but for the spec-scoped
        values (``SPEC_SCOPED``) while the spec's version is the same."""
        entry = self._derived.pop(id(old), None)
        if entry is None or entry[0] is not old:
            return
        kept = {name: value for name, value in entry[1].items() if name.startswith(SPEC_SCOPED)}
        if kept and _spec_version(old) is not None and _spec_version(old) == _spec_version(new):
            self._derived[id(new)] = (new, kept)

    def some(self, kind: str, parse: Parse, items: Iterable[tuple[str, bytes]]) -> list[Any]:
        """The readable ones among ``items`` (an unreadable object is left out, see ``Unreadable``).
        ``one`` for each, with the entries found unchanged taken in the loop itself: a set's pass
        reads a thousand machines this way, nearly all of them unchanged."""
        out = []
        table = self._table(kind, parse)
        for key, raw in items:
            hit = table.get(key)
            if hit is not None and hit[0] == raw:
                self._note_read(kind, parse, key)
                out.append(hit[1])
                continue
            try:
                out.append(self.one(kind, parse, key, raw))
            except Unreadable:
                self.forget(kind, parse, key)
        return out

    def every(self, kind: str, parse: Parse, items: dict[str, bytes]) -> list[Any]:
        """All objects of a kind: entries of objects no longer stored are dropped."""
        out = self.some(kind, parse, items.items())
        table = self._table(kind, parse)
        for key in [k for k in list(table) if k not in items]:
            self.forget(kind, parse, key)
        return out

    def every_versioned(
        self,
        kind: str,
        parse: Parse,
        versions: Mapping[bytes, bytes],
        fetch: Callable[[list[str]], list[tuple[str, bytes]]],
    ) -> list[Any] | None:
        """``every`` from the objects' versions (key → resourceVersion, as the mirror keeps them,
        undecoded): an object this table parsed at that version is taken as it is, the others are
        fetched (``fetch``: key → stored JSON of those that exist) and parsed. None when an object
        listed was gone by the fetch: the caller reads the whole kind instead, since a list from two
        instants must not lose an object. In the versions' order.

        A resourceVersion names one content of an object, so the version index (undecoded key →
        (version, parsed)) answers without decoding or comparing anything but the version's bytes:
        at 10 000 machines a list that found nothing changed cost the reader 24 ms with a Python
        call per machine, the same as comparing every object's stored JSON."""
        table = self._table(kind, parse)
        index = self._versions.get((kind, parse))
        if index is None:
            index = self._versions.setdefault((kind, parse), {})
        out: list[Any] = []
        wanted: list[bytes] = []
        at: list[int] = []
        for key, version in versions.items():
            hit = index.get(key)
            if hit is not None and hit[0] == version:
                out.append(hit[1])
                continue
            wanted.append(key)
            at.append(len(out))
            out.append(None)
        self._note_reads(kind, parse, len(versions) - len(wanted), (k.decode() for k in versions))
        if wanted:
            names = [k.decode() for k in wanted]
            found = fetch(names)
            if len(found) != len(wanted):
                return None
            # each object as parsed here, not read back from the table: another pool thread's list
            # of the same table may drop an entry meanwhile, and a list must not lose an object
            parsed: dict[str, Any] = {}
            for name, raw in found:
                try:
                    parsed[name] = self.one(kind, parse, name, raw)
                except Unreadable:
                    self.forget(kind, parse, name)
            for i, key, name in zip(at, wanted, names, strict=True):
                obj = parsed.get(name)
                if obj is None:  # unreadable: left out, as ``some`` leaves it
                    index.pop(key, None)
                    continue
                out[i] = obj
                if _version_of(obj).encode() == versions[key]:
                    index[key] = (versions[key], obj)
            out = [obj for obj in out if obj is not None]
        # snapshots (``list``), since another pool thread may list the same kind meanwhile
        if len(index) > len(versions):
            for key in [k for k in list(index) if k not in versions]:
                index.pop(key, None)
        if len(table) > len(versions):
            listed = {k.decode() for k in versions}
            for name in [k for k in list(table) if k not in listed]:
                self.forget(kind, parse, name)
        return out

    def _note_reads(self, kind: str, parse: Parse, count: int, keys: Iterable[str]) -> None:
        """``_note_read`` of many keys at once (a list's unchanged entries)."""
        if count <= 0:
            return
        read = self._read.get((kind, parse))
        if read is None:
            read = self._read.setdefault((kind, parse), (set(), [0]))
        read[0].update(keys)
        read[1][0] += count

    def _note_read(self, kind: str, parse: Parse, key: str) -> None:
        read = self._read.get((kind, parse))
        if read is None:
            read = self._read.setdefault((kind, parse), (set(), [0]))
        keys, count = read
        keys.add(key)
        count[0] += 1
        if count[0] >= SWEEP_EVERY:
            for stale in [k for k in list(self._table(kind, parse)) if k not in keys]:
                self.forget(kind, parse, stale)
            keys.clear()
            count[0] = 0

    def forget(self, kind: str, parse: Parse, key: str) -> None:
        hit = self._table(kind, parse).pop(key, None)
        if hit is not None:
            self._derived.pop(id(hit[1]), None)
        index = self._versions.get((kind, parse))
        if index is not None:
            index.pop(key.encode(), None)

    def drop_tables(self, prefix: str) -> int:
        """Forget every table named under ``prefix`` (a mirror's key prefix: in seed mode, a
        namespace the installation no longer serves), with what was derived from its objects; how
        many objects went. Without it a worker kept a departed namespace's parsed objects for life."""
        with self._lock:
            names = [name for name in list(self._tables) if name[0].startswith(prefix + ":")]
        gone = 0
        for name in names:
            table = self._tables.pop(name, None) or {}
            for _raw, obj in list(table.values()):
                self._derived.pop(id(obj), None)
            gone += len(table)
            self._read.pop(name, None)
            self._versions.pop(name, None)
        return gone

    def derived(self, obj: Any, name: str, compute: Callable[[Any], Any]) -> Any:
        """``compute(obj)``, remembered with ``obj`` while it is the cached version of its object.

        For values that cost as much as parsing and depend only on the object (a dump of part of it,
        say). An object that did not come from this cache is not remembered: only the cached ones are
        known to stay unchanged. A ``name`` starting with ``SPEC_SCOPED`` says the value depends on
        the object's spec alone: a new version of the object with the same uid and generation (a
        status write, a label) inherits it instead of computing it again.
        """
        entry = self._derived.get(id(obj))
        if entry is not None and entry[0] is obj:
            values = entry[1]
        elif self._is_cached(obj):
            values = {}
            self._derived[id(obj)] = (obj, values)
        else:
            return compute(obj)
        if name not in values:
            values[name] = compute(obj)
        return values[name]

    def _is_cached(self, obj: Any) -> bool:
        key = _key_of(obj)
        if key is None:
            return False
        return any(table.get(key, (b"", None))[1] is obj for table in list(self._tables.values()))

    def size(self, kind: str, parse: Parse) -> int:
        return len(self._table(kind, parse))


def _meta_field(obj: Any, field: str, attribute: str) -> Any:
    """A metadata field of a parsed object (a model with ``metadata``, or a dict: ``field`` is the
    API name, ``attribute`` the model's); None without it."""
    meta = obj.get("metadata") if isinstance(obj, dict) else getattr(obj, "metadata", None)
    if meta is None:
        return None
    return meta.get(field) if isinstance(meta, dict) else getattr(meta, attribute, None)


def _version_of(obj: Any) -> str:
    """The resourceVersion of a parsed object; "" without one."""
    return str(_meta_field(obj, "resourceVersion", "resource_version") or "")


def _spec_version(obj: Any) -> tuple[str, int] | None:
    """(uid, generation) of a parsed object; None without both."""
    uid, generation = _meta_field(obj, "uid", "uid"), _meta_field(obj, "generation", "generation")
    if not uid or not isinstance(generation, int) or isinstance(generation, bool) or generation <= 0:
        return None
    return str(uid), generation


def _key_of(obj: Any) -> str | None:
    """The mirror's key of a parsed object, if it has one."""
    name = _meta_field(obj, "name", "name")
    return None if not name else layout.object_key(_meta_field(obj, "namespace", "namespace"), name)


_caches: dict[int, ParsedCache] = {}


def get_parsed_cache() -> ParsedCache:
    """The process's cache (per pid: a forked worker starts empty rather than sharing its parent's)."""
    import os

    pid = os.getpid()
    cache = _caches.get(pid)
    if cache is None:
        cache = _caches[pid] = ParsedCache()
    return cache
