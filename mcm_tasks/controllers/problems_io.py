"""Answering objects the controllers cannot act on: one Warning Event on the object and a log line.

Objects reach the workers as the API server accepted them, and its schema leaves room for content our
models refuse (a quantity that is not one, a value of the wrong shape under a field the schema does not
type). Such an object is *unreadable*: whoever meets it says so on the object and goes on with the rest,
as client-go's reflector drops an object it cannot decode, so one bad object harms only itself.

Messages name the fields and what is wrong with them (``parse_problem``), never the values: they may be
huge, and a class's providerSpec may hold what does not belong in an Event.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

from mcm_tasks.api import API_VERSION, K8sObject
from mcm_tasks.cache.models import Unreadable, parse_object
from mcm_tasks.controllers.common.events import recorder
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.kube.events import WARNING, ObjectRef

log = logging.getLogger(__name__)

UNREADABLE_REASON: Final = "Unreadable"

M = TypeVar("M", bound=K8sObject)
R = TypeVar("R")


def ref_of(raw: Mapping[str, Any], default_kind: str) -> ObjectRef | None:
    """The Event's involved object, from the identity fields alone; None when there is no name."""
    found = raw.get("metadata")
    meta: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    name = meta.get("name")
    if not name:
        return None
    return ObjectRef(
        api_version=str(raw.get("apiVersion") or API_VERSION),
        kind=str(raw.get("kind") or default_kind),
        name=str(name),
        namespace=str(meta.get("namespace") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def identity(obj: K8sObject) -> ObjectRef:
    """The involved object of a model, from its metadata alone: dumping the whole model (what the
    recorder does with an object) fails on content nested deeper than pydantic serialises."""
    meta = obj.metadata
    return ObjectRef(
        api_version=obj.api_version,
        kind=obj.kind,
        name=meta.name or "",
        namespace=meta.namespace or "",
        uid=meta.uid or "",
        resource_version=meta.resource_version or "",
    )


def warn(scope: PassScope[Any], obj: K8sObject | ObjectRef, reason: str, message: str) -> None:
    """A Warning Event on ``obj`` (best effort, as every Event), through the scope's control cluster
    client (resolved here: a client that cannot be built costs the Event, not the pass)."""
    ref = obj if isinstance(obj, ObjectRef) else identity(obj)
    try:
        recorder(scope.api).event(ref, WARNING, reason, message)
    except Exception as err:  # no Event must turn a skipped object into a failed job
        log.warning("could not record %s on %s: %s: %s", reason, _name(obj), type(err).__name__, err)


def report_unreadable(scope: PassScope[Any], err: Unreadable) -> str:
    """Log and put a Warning Event on an object that does not parse (``warn``); the message said."""
    message = str(err)
    log.warning("%s; skipped", message)
    ref = ref_of(err.identity, err.kind)
    if ref is not None:
        warn(scope, ref, UNREADABLE_REASON, message)
    return message


def parse_each(scope: PassScope[Any], model: type[M], raws: Iterable[Mapping[str, Any]]) -> list[M]:
    """Every object that parses; the others reported (``report_unreadable``) and left out."""
    out = []
    for raw in raws:
        try:
            out.append(parse_object(model, raw))
        except Unreadable as err:
            report_unreadable(scope, err)
    return out


def answers_unreadable(reconciler: Callable[[str], R]) -> Callable[[str], R | None]:
    """A reconciler that answers an unreadable object (its own, or one it had to read) with a Warning
    Event on that object and ends the pass, instead of failing into backoff: no retry can parse it.
    Whatever makes the object readable again is an update, and the update's event brings the key back
    (the informer routes a class's update to its machines, a machine's to its set)."""

    @functools.wraps(reconciler)
    def run(key: str) -> R | None:
        try:
            return reconciler(key)
        except Unreadable as err:
            # the pass ended before its scope was built, or took it down with it: one for the report
            report_unreadable(PassScope.begin(key, key), err)
            return None

    return run


def _name(obj: K8sObject | ObjectRef) -> str:
    if isinstance(obj, ObjectRef):
        return f"{obj.kind} {obj.namespace}/{obj.name}"
    return f"{obj.kind} {obj.key}"
