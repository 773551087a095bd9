"""The informer's in-memory copy of what it mirrors, with the same indexes as the mirror.

It is what client-go calls the informer's indexer: the old object of an UPDATE, the old index values
to take out of Redis, and the lookups routing needs (the machine behind a node, the classes of a
secret) all come from here without a Redis round trip. Only the single writer thread touches it.
"""

from __future__ import annotations

from collections.abc import Iterator

from informers.resources import BY_KIND
from mcm_tasks.api import Obj


class Store:
    def __init__(self, namespace: str = "default") -> None:
        #: the control namespace (routing resolves a node's machine-name label in it)
        self.namespace = namespace
        self._objects: dict[str, dict[str, Obj]] = {kind: {} for kind in BY_KIND}
        # kind → index → value → keys
        self._indexes: dict[str, dict[str, dict[str, set[str]]]] = {
            kind: {name: {} for name in res.indexes} for kind, res in BY_KIND.items()
        }
        # kind → key → the index values the object is filed under (computed once per version: the
        # processor needs them for the mirror's index entries too)
        self._filed: dict[str, dict[str, dict[str, list[str]]]] = {kind: {} for kind in BY_KIND}

    def get(self, kind: str, key: str) -> Obj | None:
        return self._objects[kind].get(key)

    def keys(self, kind: str) -> list[str]:
        return list(self._objects[kind])

    def values(self, kind: str) -> Iterator[Obj]:
        return iter(list(self._objects[kind].values()))

    def items(self, kind: str) -> list[tuple[str, Obj]]:
        return list(self._objects[kind].items())

    def __len__(self) -> int:
        return sum(len(objs) for objs in self._objects.values())

    def count(self, kind: str) -> int:
        return len(self._objects[kind])

    def by_index(self, kind: str, index: str, value: str) -> list[Obj]:
        objs = self._objects[kind]
        return [objs[k] for k in sorted(self._indexes[kind][index].get(value, ())) if k in objs]

    def index_keys(self, kind: str, index: str, value: str) -> set[str]:
        return set(self._indexes[kind][index].get(value, ()))

    def index_values(self, kind: str, key: str) -> dict[str, list[str]]:
        """The index values the stored object of ``key`` is filed under ({} for none)."""
        return self._filed[kind].get(key) or {}

    def put(self, kind: str, key: str, obj: Obj, values: dict[str, list[str]] | None = None) -> Obj | None:
        """Insert or replace; returns the previous object. ``values``: the object's index values
        (``WatchedResource.index_values``), when the caller has them already."""
        old = self._objects[kind].get(key)
        after = values if values is not None else BY_KIND[kind].index_values(obj)
        self._reindex(kind, key, self.index_values(kind, key), after)
        self._filed[kind][key] = after
        self._objects[kind][key] = obj
        return old

    def delete(self, kind: str, key: str) -> Obj | None:
        old = self._objects[kind].pop(key, None)
        if old is not None:
            self._reindex(kind, key, self._filed[kind].pop(key, {}), {})
        return old

    def clear(self) -> None:
        for kind in self._objects:
            self._objects[kind].clear()
            self._filed[kind].clear()
            for index in self._indexes[kind].values():
                index.clear()

    def _reindex(
        self, kind: str, key: str, before: dict[str, list[str]], after: dict[str, list[str]]
    ) -> None:
        for name, index in self._indexes[kind].items():
            old_values, new_values = before.get(name, []), after.get(name, [])
            if old_values == new_values:
                continue
            for value in old_values:
                members = index.get(value)
                if members is not None:
                    members.discard(key)
                    if not members:
                        del index[value]
            for value in new_values:
                index.setdefault(value, set()).add(key)
