"""Watch streams: replay from a resourceVersion, then follow commits, one JSON event per line.

Each watcher keeps a cursor into the store's history and, when woken, writes every matching event
since the cursor in one chunk; the event bytes are shared by all watchers. Selectors turn an object
that enters a selection into ADDED and one that leaves it into DELETED, as the real watch cache does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from mcm_sandbox.apiserver import errors, negotiation, table, views
from mcm_sandbox.apiserver.handlers import Api, Filter, compile_filter
from mcm_sandbox.apiserver.resources import ResourceType
from mcm_sandbox.apiserver.store import ADDED, DELETED, MODIFIED, Entry, Event, dumps

INITIAL_CHUNK = 500
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
#: Seconds between BOOKMARK events on a watch that asked for them: kube-apiserver's watch cache
#: sends one about once a minute (its cacher's bookmark frequency), and one as the watch times out.
DEFAULT_BOOKMARK_INTERVAL = 60.0


#: seconds a parked watcher sleeps at most before it looks at the history again
WAKE_AT_LEAST = 5.0


@dataclass(eq=False)
class Watcher:
    """An open watch, registered so that fault injection can cut it."""

    resource: str
    waiter: asyncio.Future[None] | None = None
    cut: bool = False

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def cut_now(self) -> None:
        self.cut = True
        self.wake()


def _event_type(event: Event, flt: Filter) -> str | None:
    """The event type this watcher sees (None: nothing), selection transitions included."""
    if flt.empty:
        return event.type
    now_in = flt.matches(event.entry.obj)
    if event.type != MODIFIED:
        return event.type if now_in else None
    was_in = event.old is not None and flt.matches(event.old.obj)
    if now_in:
        return MODIFIED if was_in else ADDED
    return DELETED if was_in else None


class JsonLines:
    """The usual encoding: each event's bytes are shared by every watcher."""

    def event(self, event_type: str, event: Event) -> bytes:
        return event.line(event_type)

    def initial(self, entry: Entry) -> bytes:
        return b'{"type":"ADDED","object":' + entry.raw + b"}\n"


class TableLines:
    """``kubectl get -w``: every object as a one-row Table, column definitions in the first only."""

    def __init__(self, rt: ResourceType, include_object: str) -> None:
        self.rt = rt
        self.include_object = include_object
        self.first = True

    def _line(self, event_type: str, obj: dict[str, Any]) -> bytes:
        meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
        tbl = table.table(self.rt, [obj], meta, self.include_object)
        if not self.first:
            tbl["columnDefinitions"] = []
        self.first = False
        return dumps({"type": event_type, "object": tbl}) + b"\n"

    def event(self, event_type: str, event: Event) -> bytes:
        return self._line(event_type, event.entry.obj)

    def initial(self, entry: Entry) -> bytes:
        return self._line(ADDED, entry.obj)


class PartialLines:
    """A metadata-only watch (client-go's metadata informers): each object as PartialObjectMetadata."""

    def __init__(self, conv: negotiation.Conversion) -> None:
        self.conv = conv

    def _line(self, event_type: str, obj: dict[str, Any]) -> bytes:
        return dumps({"type": event_type, "object": negotiation.partial(obj, self.conv)}) + b"\n"

    def event(self, event_type: str, event: Event) -> bytes:
        return self._line(event_type, event.entry.obj)

    def initial(self, entry: Entry) -> bytes:
        return self._line(ADDED, entry.obj)


class ViewLines:
    """A resource served as another version's view (events.k8s.io/v1): each object converted."""

    def __init__(self, view: str) -> None:
        self.view = view

    def event(self, event_type: str, event: Event) -> bytes:
        return (
            b'{"type":"' + event_type.encode() + b'","object":' + views.raw(self.view, event.entry) + b"}\n"
        )

    def initial(self, entry: Entry) -> bytes:
        return b'{"type":"ADDED","object":' + views.raw(self.view, entry) + b"}\n"


Encoder = JsonLines | TableLines | PartialLines | ViewLines


def _status_line(err: errors.ApiError) -> bytes:
    return b'{"type":"ERROR","object":' + dumps(err.status()) + b"}\n"


def _bookmark(
    rt: ResourceType, rv: int, initial_end: bool = False, conv: negotiation.Conversion | None = None
) -> bytes:
    """An empty object carrying the resourceVersion; a metadata-only watch gets it as
    PartialObjectMetadata, as upstream transforms every event's object."""
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    kind, api_version = rt.kind, rt.api_version
    if conv is not None and conv.kind == negotiation.PARTIAL:
        kind, api_version = negotiation.PARTIAL, conv.api_version
    return (
        dumps({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": meta}})
        + b"\n"
    )


class WatchOptions:
    def __init__(self, query: dict[str, str]) -> None:
        rv = query.get("resourceVersion", "")
        if rv and not rv.isdigit():
            raise errors.bad_request(f"invalid resourceVersion: {rv!r}")
        self.rv = int(rv) if rv else 0
        self.from_now = rv in ("", "0")
        try:
            self.timeout = float(query.get("timeoutSeconds") or 0)
        except ValueError as exc:
            raise errors.bad_request(f"invalid timeoutSeconds: {query['timeoutSeconds']!r}") from exc
        self.bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        self.send_initial = query.get("sendInitialEvents", "").lower() == "true"


async def serve_watch(
    request: web.Request,
    api: Api,
    rt: ResourceType,
    namespace: str | None,
    query: dict[str, str],
    watchers: set[Watcher],
    bookmark_interval: float,
    conv: negotiation.Conversion | None = None,
) -> web.StreamResponse:
    encoder: Encoder
    if conv is not None and conv.kind == negotiation.TABLE:
        encoder = TableLines(rt, query.get("includeObject", "Metadata"))
    elif conv is not None and conv.kind == negotiation.PARTIAL:
        encoder = PartialLines(conv)
    else:  # a PartialObjectMetadataList watch: upstream's per-event transform fails, objects go as they are
        encoder = ViewLines(rt.view) if rt.view else JsonLines()
    flt = compile_filter(rt, query.get("labelSelector", ""), query.get("fieldSelector", ""))
    opts = WatchOptions(query)
    store = api.store
    resp = web.StreamResponse(
        status=200, headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"}
    )
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    watcher = Watcher(rt.plural)
    watchers.add(watcher)
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    try:
        if opts.from_now or opts.send_initial:
            cursor = store.rv
            await _send_initial(resp, api, rt, namespace, flt, encoder)
            if opts.send_initial and opts.bookmarks:
                await resp.write(_bookmark(rt, cursor, initial_end=True, conv=conv))
        else:
            cursor = opts.rv
        last_bookmark = time.monotonic()
        while not watcher.cut:
            now = time.monotonic()
            if opts.timeout and now - started >= opts.timeout:
                if opts.bookmarks:
                    await resp.write(_bookmark(rt, cursor, conv=conv))
                break
            events = store.events_after(cursor)
            if events is None:
                await resp.write(
                    _status_line(
                        errors.expired(f"too old resource version: {cursor} ({store.oldest_rv + 1})")
                    )
                )
                break
            if events:
                cursor = events[-1].rv
                chunk = b"".join(
                    encoder.event(event_type, ev)
                    for ev in events
                    if ev.storage == rt.storage
                    and (namespace is None or ev.namespace == namespace)
                    and (event_type := _event_type(ev, flt)) is not None
                )
                if chunk:
                    await resp.write(chunk)
                continue
            if opts.bookmarks and now - last_bookmark >= bookmark_interval:
                await resp.write(_bookmark(rt, cursor, conv=conv))
                last_bookmark = now
            deadline = bookmark_interval if opts.bookmarks else 3600.0
            if opts.timeout:
                deadline = min(deadline, opts.timeout - (now - started))
            waiter = loop.create_future()
            watcher.waiter = waiter
            store.wake_on_commit(waiter, rt.storage, namespace)
            # woken only by its own events, a watcher still moves its cursor past the others' at
            # least this often, so that a busy namespace cannot age it out of the history
            timer = loop.call_later(max(0.0, min(deadline, WAKE_AT_LEAST)), watcher.wake)
            try:
                await waiter
            finally:
                timer.cancel()
                watcher.waiter = None
        if watcher.cut:
            if request.transport is not None:
                request.transport.close()
            return resp
        await resp.write_eof()
    except (ConnectionResetError, ConnectionError, asyncio.CancelledError):
        with contextlib.suppress(Exception):
            if request.transport is not None:
                request.transport.close()
        if asyncio.current_task() and asyncio.current_task().cancelling():  # type: ignore[union-attr]
            raise
    finally:
        watchers.discard(watcher)
    return resp


async def _send_initial(
    resp: web.StreamResponse,
    api: Api,
    rt: ResourceType,
    namespace: str | None,
    flt: Filter,
    encoder: Encoder,
) -> None:
    entries = api.list_entries(rt, namespace, flt)
    for i in range(0, len(entries), INITIAL_CHUNK):
        await resp.write(b"".join(encoder.initial(e) for e in entries[i : i + INITIAL_CHUNK]))
