"""The data of MachineClass secrets (cloud credentials, userData), read from the API server.

Redis never holds secret data: the informers' mirror keeps a Secret's metadata and a digest of its
data only (``informers.resources._secret_stored``). A driver call that needs the data (create,
initialize, delete, status during deletion, orphan listing) reads it here with a GET through the
control cluster's client, which draws from the shared API budget (``mcm_tasks.kube.ratelimit``).

A short in-process cache keeps a burst of creations from costing one GET each: an entry is used
while it is younger than ``--secret-cache-ttl`` and, when the mirror is synced, while the mirror
still shows the resourceVersion the data was read at (an edited secret is read again at once). The
cache lives in the worker process's memory only; ``0`` turns it off.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcm_tasks import kinds
from mcm_tasks.kube import ops


def decode_secret_data(secret: Mapping[str, Any]) -> dict[str, bytes]:
    """A Secret's ``data`` (base64) with any ``stringData`` on top, as the API server merges them."""
    out = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    out.update({k: str(v).encode() for k, v in (secret.get("stringData") or {}).items()})
    return out


@dataclass(frozen=True)
class _Entry:
    resource_version: str
    data: dict[str, bytes]
    read_at: float


class SecretDataCache:
    """(namespace, name) → the data read from the API server, for ``ttl`` seconds at most."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}
        #: API reads made (metrics, tests)
        self.reads = 0

    def get(
        self,
        name: str,
        namespace: str,
        fetch: Callable[[str, str], Mapping[str, Any] | None],
        resource_version: str | None = None,
        *,
        ttl: float,
    ) -> dict[str, bytes] | None:
        """The decoded data, or None when the secret does not exist. ``resource_version`` is what the
        mirror shows (None when the mirror cannot tell): a cached entry of another version is stale;
        an entry older than ``ttl`` seconds (``settings.secret_cache_ttl``) too."""
        key = (namespace, name)
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
        if (
            entry is not None
            and now - entry.read_at < ttl
            and (resource_version is None or resource_version == entry.resource_version)
        ):
            return entry.data
        found = fetch(name, namespace)
        self.reads += 1
        with self._lock:
            self._drop_expired(now, ttl)
        if found is None:  # not cached: a secret created next is seen by the next read
            return None
        data = decode_secret_data(found)
        if ttl > 0:
            version = str((found.get("metadata") or {}).get("resourceVersion", ""))
            with self._lock:
                self._entries[key] = _Entry(version, data, now)
        return data

    def _drop_expired(self, now: float, ttl: float) -> None:
        for key in [k for k, e in self._entries.items() if now - e.read_at >= ttl]:
            del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_cache = SecretDataCache()


def get_cache() -> SecretDataCache:
    return _cache


def read_secret_data(
    api: Any, name: str, namespace: str, resource_version: str | None = None, *, ttl: float
) -> dict[str, bytes] | None:
    """The decoded data of a secret from the API server (or the short in-process cache, for ``ttl``
    seconds)."""

    def fetch(n: str, ns: str) -> Mapping[str, Any] | None:
        found: Mapping[str, Any] | None = ops.get(api, kinds.SECRET.resource, n, ns, missing_ok=True)
        return found

    return _cache.get(name, namespace, fetch, resource_version, ttl=ttl)
