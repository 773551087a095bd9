"""The informer's in-memory copy of what it mirrors, with the same indexes as the mirror.

It is what client-go calls the informer's indexer: the old object of an UPDATE, the old index values
to take out of Redis, and the lookups routing needs (the machine behind a node, the classes of a
secret) all come from here without a Redis round trip. Only the single writer thread touches it.
"""

from __future__ import annotations

from collections.abc import Iterator

from informers.resources import BY_KIND, Obj


class Store:
    def __init__(self, namespace: str = "default") -> None:
        #: the control namespace (routing resolves a node's machine-name label in it)
        self.namespace = namespace
        self._objects: dict[str, dict[str, Obj]] = {kind: {} for kind in BY_KIND}
        # kind → index → value → keys
        self._indexes: dict[str, dict[str, dict[str, set[str]]]] = {
            kind: {name: {} for name in res.indexes} for kind, res in BY_KIND.items()
        }

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

    def put(self, kind: str, key: str, obj: Obj) -> Obj | None:
        """Insert or replace; returns the previous object."""
        old = self._objects[kind].get(key)
        self._reindex(kind, key, old, obj)
        self._objects[kind][key] = obj
        return old

    def delete(self, kind: str, key: str) -> Obj | None:
        old = self._objects[kind].pop(key, None)
        if old is not None:
            self._reindex(kind, key, old, None)
        return old

    def clear(self) -> None:
        for kind in self._objects:
            self._objects[kind].clear()
            for index in self._indexes[kind].values():
                index.clear()

    def _reindex(self, kind: str, key: str, old: Obj | None, new: Obj | None) -> None:
        res = BY_KIND[kind]
        before, after = res.index_values(old), res.index_values(new)
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
