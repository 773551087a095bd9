"""The queue contract's read-ahead for a pass about one mirrored object (``registry.ReadAhead``):
what the pass reads first, the mirror's synced kinds and its object, planned as Redis keys for BEGIN
and handed to the pass's read memo (``CacheReader.seed``) once BEGIN read them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcm_tasks.cache import get_reader, layout
from mcm_tasks.controllers.common.context_io import namespace_of
from mcm_tasks.settings import get_settings


@dataclass(frozen=True)
class MirrorReadAhead:
    """The first read of a pass about one mirrored object: the mirror's synced kinds and the object,
    read by the queue contract's BEGIN (``registry.ReadAhead``) and handed to the pass's read memo
    (``CacheReader.seed``), so that the pass's own first round trip is not needed: a machine's
    creation is two passes, and an idle fleet's LongRetry rechecks are each one."""

    kind: str

    def plan(self, key: str) -> tuple[list[str], list[str]]:
        namespace, name = namespace_of(key, get_settings().namespace)
        return [layout.synced_key(), layout.objects_key(self.kind)], [layout.object_key(namespace, name)]

    def seed(self, key: str, found: Sequence[Any]) -> None:
        synced, stored = found[0], found[1]
        namespace, name = namespace_of(key, get_settings().namespace)
        get_reader().seed(synced or (), {(self.kind, layout.object_key(namespace, name)): stored or None})
