"""List and watch one resource (client-go's reflector), feeding events to the single writer.

A watch can go quiet without closing (the most reported bug of Python operators), so every watch
has two clocks: ``timeoutSeconds`` asks the server to end it (between settings.watch_timeout and
twice it, as client-go's ``minWatchTimeout``), and the socket read timeout
(settings.watch_client_timeout, reset by each byte or bookmark) ends it from our side if the server
goes silent. Either way the loop watches again from
the last resourceVersion seen; only a 410 Gone (the version left the server's history) costs a
re-list. Connection errors back off exponentially with jitter, reset by a successful list or watch.
"""

from __future__ import annotations

import logging
import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import urllib3
import urllib3.exceptions
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from informers.processor import Item, Relisted, WatchEvent
from informers.resources import WatchedResource
from mcm_tasks.api import Obj
from mcm_tasks.kube import rest
from mcm_tasks.kube.errors import is_gone
from mcm_tasks.settings import Settings
from mcm_tasks.tenancy import carried

log = logging.getLogger(__name__)

PAGE_SIZE = 500
CONNECT_TIMEOUT = 10.0
LIST_TIMEOUT = 60.0
BACKOFF_BASE = 0.2
BACKOFF_MAX = 30.0
READ_SIZE = 1 << 16


class Gone(Exception):
    """The resourceVersion we watch from is no longer in the server's history: re-list."""


@dataclass
class ReflectorStats:
    lists: int = 0
    watches: int = 0
    gone: int = 0
    errors: int = 0
    events: int = 0
    bookmarks: int = 0
    #: watches ended by our read timeout (the server neither sent nor closed)
    timeouts: int = 0
    #: objects skipped because no JSON decoder here can read them (nested deeper than orjson's limit)
    undecodable: int = 0
    resource_version: str = ""

    def as_fields(self, kind: str) -> dict[str, str]:
        return {f"{kind}.{name}": str(value) for name, value in vars(self).items()}


@dataclass
class Backoff:
    base: float = BACKOFF_BASE
    cap: float = BACKOFF_MAX
    failures: int = 0
    rand: Callable[[], float] = field(default=random.random)

    def next(self) -> float:
        delay = min(self.cap, self.base * 2**self.failures)
        self.failures += 1
        return delay * (0.5 + self.rand())

    def reset(self) -> None:
        self.failures = 0


class Reflector:
    def __init__(
        self,
        resource: WatchedResource,
        api: ApiClient,
        namespace: str | None,
        emit: Callable[[Item], None],
        settings: Settings,
        stop: threading.Event,
    ) -> None:
        self.resource = resource
        self.api = api
        self.path = resource.collection_path(namespace)
        self.emit = emit
        self.stop_event = stop
        self.server_timeout = max(1, int(settings.watch_timeout))
        self.client_timeout = max(1.0, settings.watch_client_timeout)
        self.stats = ReflectorStats()
        self.backoff = Backoff()
        self._lock = threading.Lock()
        self._response: Any = None
        self._need_list = True
        self._initial = True
        # within its creator's context: a seed-mode tenant's reflector reads with the tenant's settings
        self.thread = threading.Thread(
            target=carried(self.run), name=f"reflector-{resource.kind}", daemon=True
        )

    # --- control from other threads -------------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def relist(self, initial: bool) -> None:
        """List again before the next watch (the writer lost its store, e.g. Redis was emptied)."""
        with self._lock:
            self._need_list = True
            self._initial = self._initial or initial
        self._interrupt()

    def stop(self) -> None:
        self.stop_event.set()
        self._interrupt()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def _interrupt(self) -> None:
        """Unblock a read in progress: shutting the socket down wakes the reader at once."""
        with self._lock:
            response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # already closed: nothing to wake
                log.debug("shutdown of %s watch failed", self.resource.kind, exc_info=True)

    # --- the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                if self._take_list_request():
                    self._list()
                self._watch()
            except Gone:
                self.stats.gone += 1
                log.info(
                    "%s: resourceVersion %s is gone, re-listing",
                    self.resource.kind,
                    self.stats.resource_version,
                )
                with self._lock:
                    self._need_list = True
            except Exception as err:  # network, server errors, bad lines: all end in a retry
                if self.stop_event.is_set():
                    break
                self.stats.errors += 1
                delay = self.backoff.next()
                log.warning(
                    "%s: list/watch failed (%s); retrying in %.1fs", self.resource.kind, _describe(err), delay
                )
                self.stop_event.wait(delay)

    def _take_list_request(self) -> bool:
        with self._lock:
            return self._need_list

    def _list(self) -> None:
        objects, version = self._list_all()
        with self._lock:
            initial, self._initial, self._need_list = self._initial, False, False
        self.emit(Relisted(self.resource.kind, objects, version, initial))
        self.stats.lists += 1
        self.stats.resource_version = version
        self.backoff.reset()

    def _list_all(self) -> tuple[list[Obj], str]:
        """A consistent list in pages; a continue token that expired (410) starts over."""
        while True:
            objects: list[Obj] = []
            version, cont = "", None
            #: after a page that cannot be decoded, one object at a time until the culprit is skipped
            limit = PAGE_SIZE
            try:
                while True:
                    page = self._page(cont, limit)
                    if page is None and limit > 1:
                        limit = 1
                        continue
                    if page is None:
                        raw = self._get_bytes({"limit": 1, "continue": cont})
                        self._undecodable(raw, "list")
                        version = version or _field(raw, "resourceVersion")
                        cont, limit = _field(raw, "continue"), PAGE_SIZE
                    else:
                        version = version or str((page.get("metadata") or {}).get("resourceVersion", ""))
                        objects.extend(self._typed(o) for o in page.get("items") or ())
                        cont = (page.get("metadata") or {}).get("continue")
                    if not cont:
                        return objects, version
            except ApiException as err:
                if not (cont and is_gone(err)):
                    raise

    def _page(self, cont: str | None, limit: int) -> dict[str, Any] | None:
        """One page of the list; None when it holds an object no decoder here can read."""
        raw = self._get_bytes({"limit": limit, "continue": cont})
        try:
            return orjson.loads(raw)  # type: ignore[no-any-return]
        except orjson.JSONDecodeError:
            return None

    def _undecodable(self, raw: bytes, where: str) -> None:
        """Say that an object was skipped, with what can be told of it without decoding it."""
        self.stats.undecodable += 1
        log.warning(
            "%s: %s: object %s (%d bytes) cannot be decoded (nested deeper than %d levels?): skipped; "
            "it is neither mirrored nor routed until it changes",
            self.resource.kind, where, _field(raw, "name") or "?", len(raw), MAX_DECODE_DEPTH,
        )  # fmt: skip

    def _get(self, query: dict[str, Any]) -> dict[str, Any]:
        return orjson.loads(self._get_bytes(query))  # type: ignore[no-any-return]

    def _get_bytes(self, query: dict[str, Any]) -> bytes:
        # a list answers at once, however silent the watches are: its read timeout is not theirs
        resp = rest.open_request(
            self.api,
            "GET",
            self.path,
            query=query,
            timeout=(CONNECT_TIMEOUT, max(self.client_timeout, LIST_TIMEOUT)),
        )
        try:
            data: bytes = resp.read()
        finally:
            resp.response.release_conn()
        return data

    def _typed(self, obj: Obj) -> Obj:
        obj.setdefault("apiVersion", self.resource.api.api_version)
        obj.setdefault("kind", self.resource.api.kind)
        return obj

    def _watch(self) -> None:
        query = {
            "watch": "true",
            "resourceVersion": self.stats.resource_version,
            "allowWatchBookmarks": "true",
            # client-go's reflector: between minWatchTimeout and twice it, so that a process's many
            # watches do not end (and are opened again) together; each reopening is a request
            "timeoutSeconds": max(1, int(self.server_timeout * random.uniform(1.0, 2.0))),
        }
        try:
            resp = rest.open_request(
                self.api, "GET", self.path, query=query, timeout=(CONNECT_TIMEOUT, self.client_timeout)
            )
        except ApiException as err:
            if is_gone(err):
                raise Gone() from err
            raise
        response = resp.response
        with self._lock:
            if self._need_list or self.stop_event.is_set():
                response.release_conn()
                return
            self._response = response
        self.stats.watches += 1
        self.backoff.reset()
        try:
            for line in _lines(response):
                self._handle(line)
                if self._take_list_request():
                    return
        except urllib3.exceptions.ReadTimeoutError:
            # silent for watch_client_timeout: the stream is presumed dead; watch again at once
            self.stats.timeouts += 1
        finally:
            with self._lock:
                self._response = None
            response.release_conn()

    def _handle(self, line: bytes) -> None:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            # skipped, but the watch moves past it: retrying would read the same line forever
            version = _field(line, "resourceVersion")
            if not version:
                raise
            self._undecodable(line, "watch")
            self.stats.resource_version = version
            return
        type_ = event.get("type")
        obj = event.get("object") or {}
        if type_ == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if type_ == "BOOKMARK":
            self.stats.bookmarks += 1
        else:
            self.emit(WatchEvent(self.resource.kind, str(type_), self._typed(obj)))
            self.stats.events += 1
        if version:
            self.stats.resource_version = version
        self.backoff.reset()


def _lines(response: urllib3.BaseHTTPResponse) -> Any:
    """Newline-delimited JSON from a streaming response, as chunks arrive (never waiting to fill a buffer)."""
    pending = b""
    if getattr(response, "chunked", False):
        chunks = response.stream(None)
    else:
        chunks = iter(lambda: response.read1(READ_SIZE), b"")  # type: ignore[attr-defined]
    for chunk in chunks:
        pending += chunk
        if b"\n" not in pending:
            continue
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if pending.strip():
        yield pending


#: orjson's nesting limit; the Kubernetes API server accepts deeper objects
MAX_DECODE_DEPTH = 1024


def _field(raw: bytes, name: str) -> str:
    """The first string value of ``name`` in undecodable JSON: in an API server's output an object's
    ``metadata`` (name, resourceVersion) and a list's ``metadata`` (continue) come before any spec."""
    found = re.search(rb'"' + re.escape(name.encode()) + rb'"\s*:\s*"((?:[^"\\]|\\.)*)"', raw)
    return found.group(1).decode(errors="replace") if found else ""


def _describe(err: BaseException) -> str:
    if isinstance(err, ApiException):
        return f"{err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"
