"""One storage, two API shapes: ``events.k8s.io/v1`` Events are core/v1 Events seen differently.

kube-apiserver keeps one ``events`` resource and converts between the two versions
(``k8s.io/kubernetes/pkg/apis/events/v1`` conversions), so an Event recorded through either API is
listed and watched through both. The sandbox stores the core/v1 form and converts the events.k8s.io
form on the way in and out.
"""

from __future__ import annotations

from typing import Any

from mcm_sandbox.apiserver.store import Entry, dumps

Obj = dict[str, Any]
EVENTS_VIEW = "events.k8s.io/v1"

# events.k8s.io/v1 field → core/v1 field
_RENAMED = {
    "regarding": "involvedObject",
    "note": "message",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
    "reportingController": "reportingComponent",
}
_SAME = ("metadata", "eventTime", "series", "reportingInstance", "action", "reason", "related", "type")


def _convert(obj: Obj, names: dict[str, str], api_version: str) -> Obj:
    out: Obj = {"kind": "Event", "apiVersion": api_version}
    for key in _SAME:
        if key in obj:
            out[key] = obj[key]
    for src, dst in names.items():
        if src in obj:
            out[dst] = obj[src]
    return out


def to_view(view: str, obj: Obj) -> Obj:
    if view != EVENTS_VIEW:
        return obj
    out = _convert(obj, {core: new for new, core in _RENAMED.items()}, EVENTS_VIEW)
    out.setdefault("eventTime", None)  # not omitempty upstream: an old-style Event shows null
    return out


def from_view(view: str, obj: Obj) -> Obj:
    if view != EVENTS_VIEW:
        return obj
    out = _convert(obj, _RENAMED, "v1")
    out.setdefault("involvedObject", {})  # required in core/v1
    return out


def raw(view: str, entry: Entry) -> bytes:
    return dumps(to_view(view, entry.obj)) if view else entry.raw
