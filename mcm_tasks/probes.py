"""``/healthz`` and ``/readyz`` that tell the truth (for the Helm chart's liveness and readiness probes).

- **Readiness** (``/readyz``): every dependency the process needs answers now: Redis (a PING with
  a 2 s timeout) and, where the process talks to it, the control cluster's API server (its own
  ``/healthz``). The informer and beat also report whether they lead (a standby is ready: it takes
  over when the leader goes). Results are cached for ``CHECK_CACHE`` seconds, so a probe storm
  costs one PING a second.
- **Liveness** (``/healthz``): each loop that must keep turning (a worker's consumer, seen through
  its event heartbeats; the informer's writer and its elector; beat's ticks) beats ``PROGRESS``;
  the process is wedged when a loop has not beaten for ``--liveness-timeout`` *while every
  dependency answers*. A loop that waits for Redis or the API server is not wedged: readiness
  fails instead, and a restart would not bring Redis back.

Both answer JSON: ``{"ok": bool, "checks": {name: {"ok": bool, "detail": str}}, ...}``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import redis

from mcm_tasks.settings import Settings

#: seconds a readiness result is reused
CHECK_CACHE: Final = 1.0
#: seconds a dependency gets to answer
CHECK_TIMEOUT: Final = 2.0

#: a check: (ok, detail)
Check = Callable[[], tuple[bool, str]]

#: the Redis hash the informer writes its watch lag per kind into (``informers/runner.py``), read by
#: ``mcm_informer_lag_seconds`` (``observability.InformerLagCollector``)
INFORMER_LAG_KEY_PARTS = ("informer", "lag")


class Progress:
    """When each named loop of this process last made progress (monotonic seconds)."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def beat(self, loop: str) -> None:
        self._last[loop] = time.monotonic()

    def forget(self, loop: str) -> None:
        self._last.pop(loop, None)

    def stalled(self, timeout: float) -> dict[str, float]:
        """Loops silent for longer than ``timeout``, with their silence in seconds."""
        now = time.monotonic()
        return {loop: now - at for loop, at in list(self._last.items()) if now - at > timeout}


PROGRESS: Final = Progress()

#: the components this process leads (``mcm_leader`` and ``/readyz``), by name: informer, beat
LEADING: Final[dict[str, bool]] = {}


def redis_check(url: str) -> Check:
    from mcm_tasks.redisdb import connect, redis_target

    client = connect(redis_target(url=url), timeout=CHECK_TIMEOUT)  # Sentinel, TLS and ACL user alike

    def check() -> tuple[bool, str]:
        try:
            client.ping()
        except (redis.RedisError, OSError) as err:
            return False, f"{type(err).__name__}: {err}"
        return True, "PING ok"

    return check


def apiserver_check(settings: Settings) -> Check:
    """The control cluster's API server answers its ``/healthz`` (through a client of its own,
    outside the shared request budget: a probe must not wait for tokens)."""
    from kubernetes.client import ApiClient

    from mcm_tasks.kube import rest
    from mcm_tasks.kube.clients import ClusterConfigError, load_configuration

    api: list[ApiClient] = []

    def check() -> tuple[bool, str]:
        if not api:
            try:
                api.append(ApiClient(load_configuration(settings.control_kubeconfig, "control_kubeconfig")))
            except ClusterConfigError as err:
                if settings.control_kubeconfig:
                    return False, str(err)
                return True, "skipped: no control kubeconfig and not in a pod"
        try:
            code, text = rest.get_text(api[0], "/healthz", timeout=CHECK_TIMEOUT)
        except Exception as err:  # refused, DNS, TLS, timeout: all mean unreachable
            return False, f"{type(err).__name__}: {err}"
        return code == 200, f"{code} {text.strip()[:100]}"

    return check


@dataclass
class Probes:
    """What ``/healthz`` and ``/readyz`` of one process check."""

    settings: Settings
    checks: Mapping[str, Check] = field(default_factory=dict)
    _cache: tuple[float, dict[str, tuple[bool, str]]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _results(self) -> dict[str, tuple[bool, str]]:
        with self._lock:
            now = time.monotonic()
            if self._cache is None or now - self._cache[0] > CHECK_CACHE:
                self._cache = (now, {name: check() for name, check in self.checks.items()})
            return self._cache[1]

    def ready(self) -> tuple[bool, dict[str, Any]]:
        results = self._results()
        ok = all(r[0] for r in results.values())
        body: dict[str, Any] = {
            "ok": ok,
            "checks": {n: {"ok": r[0], "detail": r[1]} for n, r in results.items()},
        }
        if LEADING:
            body["leading"] = dict(LEADING)
        return ok, body

    def alive(self) -> tuple[bool, dict[str, Any]]:
        timeout = self.settings.liveness_timeout
        stalled = PROGRESS.stalled(timeout)
        waiting = not all(r[0] for r in self._results().values())
        body: dict[str, Any] = {
            "ok": not stalled or waiting,
            "stalled": {loop: round(s, 1) for loop, s in stalled.items()},
            "liveness_timeout": timeout,
        }
        if stalled and waiting:
            body["detail"] = "stalled while a dependency is unreachable: waiting, not wedged (see /readyz)"
        return body["ok"], body


def standard_probes(settings: Settings, apiserver: bool = True) -> Probes:
    checks: dict[str, Check] = {"redis": redis_check(settings.redis_url)}
    if apiserver:
        checks["apiserver"] = apiserver_check(settings)
    return Probes(settings, checks)
