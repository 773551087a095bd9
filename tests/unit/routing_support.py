"""An informer processor over an in-memory store, for the routing tests: give it objects, feed it an
event, read which tasks the event routes."""

from __future__ import annotations

from informers.events import ADDED, Routing
from informers.processor import Processor, WatchEvent
from informers.store import Store
from mcm_sandbox.testing import fixtures as fx
from mcm_tasks.api import Obj

NS = fx.NS


class World:
    """The informer's store and processor; ``given`` fills it, ``then`` returns what one event routes."""

    def __init__(self) -> None:
        self.processor = Processor(Store(NS))

    def given(self, kind: str, *objs: Obj) -> World:
        self.processor.process([WatchEvent(kind, ADDED, o) for o in objs])
        return self

    def then(self, kind: str, type_: str, obj: Obj) -> Routing:
        return self.processor.process([WatchEvent(kind, type_, obj)]).routing


def k(name: str) -> str:
    return f"{NS}/{name}"
