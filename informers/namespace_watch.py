"""Seed mode: a watch on the selected Namespaces, so that the seed informer lists them only when one
changed (``SeedInformer.refresh``).

The seed informer looks at its namespaces every ``--seed-refresh-period`` (2 s) and used to LIST
them each time: thirty LISTs a minute of every Namespace matching the selector, a fifth of the
seed informer's CPU at rest, and load on the control cluster's API server for a list that changes
a few times a day. This watch marks the list stale when a Namespace matching the selector is
added, changed or deleted; the informer lists again then, and at least every ``RELIST_EVERY`` as a
backstop (a watch that went quiet without closing). Any error, or a 410 Gone, also marks the list
stale and the watch starts again (with backoff); it resumes from the last resourceVersion seen.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import orjson
from kubernetes.client import ApiClient

from informers.informer import CONNECT_TIMEOUT, Backoff, _lines
from mcm_tasks import kinds
from mcm_tasks.kube import rest
from mcm_tasks.settings import Settings
from mcm_tasks.tenancy import carried

log = logging.getLogger(__name__)

#: the namespaces are listed at least this often, watch or not
RELIST_EVERY = 60.0


class NamespaceWatch:
    """Watches the Namespaces of ``--namespace-selector``; ``stale`` is set by any change."""

    def __init__(self, api: ApiClient, settings: Settings) -> None:
        self.api = api
        self.selector = settings.namespace_selector or ""
        self.server_timeout = max(1, int(settings.watch_timeout))
        self.client_timeout = max(1.0, settings.watch_client_timeout)
        #: set: the namespaces must be listed again (at first, and after any change or error)
        self.stale = threading.Event()
        self.stale.set()
        self.events = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        self._version = ""
        self.thread = threading.Thread(target=carried(self._run), name="namespace-watch", daemon=True)

    def start(self) -> NamespaceWatch:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            try:
                response.shutdown()  # wakes the read at once
            except Exception:  # already closed
                log.debug("shutdown of the namespace watch failed", exc_info=True)
        self.thread.join(5.0)

    def _run(self) -> None:
        backoff = Backoff()
        while not self._stop.is_set():
            try:
                self._watch()
                backoff.reset()
            except Exception as err:  # the list is read again; the watch starts over after a pause
                self.stale.set()
                self._version = ""
                if self._stop.is_set():
                    return
                log.debug("namespace watch: %s: %s", type(err).__name__, err)
                self._stop.wait(backoff.next())

    def _watch(self) -> None:
        query = {
            "watch": "true",
            "labelSelector": self.selector,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.server_timeout,
        }
        if self._version:
            query["resourceVersion"] = self._version
        resp = rest.open_request(
            self.api,
            "GET",
            kinds.NAMESPACE.resource.path(None),
            query=query,
            timeout=(CONNECT_TIMEOUT, self.client_timeout),
        )
        with self._lock:
            if self._stop.is_set():
                resp.response.release_conn()
                return
            self._response = resp.response
        try:
            for line in _lines(resp.response):
                event = orjson.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":  # 410 Gone and the like: list again, watch from now
                    raise RuntimeError(str(obj.get("message") or obj)[:200])
                if kind != "BOOKMARK":
                    self.events += 1
                    self.stale.set()
                self._version = str((obj.get("metadata") or {}).get("resourceVersion") or self._version)
        finally:
            with self._lock:
                self._response = None
            resp.response.release_conn()
