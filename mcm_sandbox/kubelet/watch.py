"""The kubelet simulator's reads of the target cluster, kept current by watches.

A real kubelet watches its own Node and Pods; the simulator plays every kubelet at once, and
listing every Node each tick made it the busiest process of a 1000-node sandbox (a full decode
of all Nodes twice a second) and loaded the target API server with lists nobody else asked for.
Here one reflector per kind (the informers' own, so re-watching, 410 re-lists and back-off behave
as they do in the controller) keeps a dict of the objects, and a tick reads the dicts.

A watch lags a write by a moment, so a tick may act on an object it has just changed; every
kubelet action is idempotent or tolerates 404/409 for that reason. Tests that call ``tick()`` and
assert right after their own writes keep the simulator's default, a list per tick.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes.client import ApiClient

from informers.informer import Reflector
from informers.processor import Item, Relisted, WatchEvent
from informers.resources import TARGET, WatchedResource, key_of
from mcm_tasks import kinds
from mcm_tasks.settings import Settings

Obj = dict[str, Any]

#: what a tick reads: nodes, pods, and what CSI volumes need
WATCHED = (
    kinds.NODE.resource,
    kinds.POD.resource,
    kinds.PERSISTENT_VOLUME_CLAIM.resource,
    kinds.PERSISTENT_VOLUME.resource,
    kinds.VOLUME_ATTACHMENT.resource,
)


class WatchedLists:
    """``list(path)`` answered from watches, for the collection paths of :data:`WATCHED`."""

    def __init__(self, api: ApiClient, settings: Settings | None = None) -> None:
        settings = settings or Settings()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, Obj]] = {}
        self._synced: dict[str, threading.Event] = {}
        self._reflectors: list[Reflector] = []
        for res in WATCHED:
            path = res.path()
            self._objects[path] = {}
            self._synced[path] = threading.Event()
            watched = WatchedResource(path, res, TARGET)
            self._reflectors.append(Reflector(watched, api, None, self._apply, settings, self._stop))

    def start(self) -> None:
        for reflector in self._reflectors:
            reflector.start()

    def stop(self, deadline: float | None = None) -> None:
        """Stop every reflector, then wait for them until ``deadline`` (monotonic; default 5 s)."""
        deadline = time.monotonic() + 5.0 if deadline is None else deadline
        for reflector in self._reflectors:
            reflector.stop()
        for reflector in self._reflectors:
            reflector.join(max(deadline - time.monotonic(), 0.0))

    def synced(self) -> bool:
        """Every kind listed once: before that, a tick would see an empty cluster."""
        return all(event.is_set() for event in self._synced.values())

    def list(self, path: str) -> list[Obj]:
        with self._lock:
            return list(self._objects[path].values())

    def _apply(self, item: Item) -> None:
        """The reflector's events (its ``kind`` is the collection path); objects are replaced
        whole, never changed in place, so a list handed out stays as it was read."""
        path = item.kind
        with self._lock:
            objects = self._objects[path]
            if isinstance(item, Relisted):
                objects.clear()
                objects.update((key_of(obj), obj) for obj in item.objects)
                self._synced[path].set()
            elif isinstance(item, WatchEvent):
                if item.type == "DELETED":
                    objects.pop(key_of(item.obj), None)
                else:
                    objects[key_of(item.obj)] = item.obj
