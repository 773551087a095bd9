"""The endpoints every mcm-tasks process serves, as MCM's do: ``/metrics``, ``/healthz``, ``/readyz``,
``/configz``.

Metrics add up across pods (summing a series over every pod's scrape gives the installation's
figure):
- **fleet metrics** describe the whole installation: the queue metrics (kept in Redis by the queue
  scripts) and the machine, MachineSet and MachineDeployment gauges (computed from the mirror).
  Any process could compute them, so only one does: the leading informer (``serve(fleet=…)``);
  every other process leaves them out, so a sum over pods counts them once. In seed mode they are
  read for each served namespace and carry its name as ``namespace`` (``tenant_metrics``);
- **process metrics** are recorded where work happens (driver calls, machine durations, failed
  joins) and each process exports its own. A Celery worker runs reconciles in forked children, so
  for it these go through prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``,
  which the worker command sets before anything creates a metric), aggregated without a ``pid``
  label;
- ``mcm_leader{component}`` is 1 in the process that leads (informer, beat), 0 in a standby;
  ``mcm_redis_up`` is 1 where the process's Redis answers (``why_metrics``, with the fleet's
  ``mcm_condition_seconds`` and ``mcm_workqueue_longest_failing_seconds``).

A collector that reads Redis yields nothing while it fails (Redis unreachable), so ``/metrics`` keeps
answering (with the process metrics) instead of failing the scrape. ``/healthz`` and ``/readyz``:
mcm_tasks/probes.py.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mcm_tasks.probes import INFORMER_LAG_KEY_PARTS, LEADING, Probes
from mcm_tasks.settings import Settings, get_settings
from mcm_tasks.why_metrics import RedisUpCollector

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: settings whose values never leave the process (they may carry credentials)
_HIDDEN_SETTINGS = frozenset({"redis_url", "redis_password", "redis_sentinel_password"})


class Guarded(Collector):
    """A scrape-time collector that yields nothing while Redis is unreachable (logged once per
    outage), and only while ``when()`` holds (the fleet metrics: only in the leader)."""

    def __init__(self, inner: Collector, when: Callable[[], bool] = lambda: True) -> None:
        self.inner = inner
        self.when = when
        self.failing = False

    def describe(self) -> Iterable[Metric]:
        return []  # described lazily: registering must not read Redis

    def collect(self) -> Iterator[Metric]:
        if not self.when():
            return
        try:
            metrics = list(self.inner.collect())
        except Exception as err:  # Redis down, or an object the mirror holds that a gauge cannot read
            if not self.failing:
                log.warning(
                    "%s left out of /metrics: %s: %s", type(self.inner).__name__, type(err).__name__, err
                )
            self.failing = True
            return
        self.failing = False
        yield from metrics


class LeaderCollector(Collector):
    """``mcm_leader{component}``: 1 where this process leads, 0 in a standby."""

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "mcm_leader",
            "1 if this process leads its component (informer, beat), else 0",
            labels=["component"],
        )
        for component, leading in sorted(LEADING.items()):
            family.add_metric([component], 1.0 if leading else 0.0)
        yield family


def informer_lag(raw: dict[Any, Any]) -> GaugeMetricFamily:
    """``mcm_informer_lag_seconds{kind}`` from the lag hash: how late the last watched change of each
    kind reached the mirror, after the API server wrote it (1 s resolution)."""
    family = GaugeMetricFamily(
        "mcm_informer_lag_seconds",
        "Seconds between the API server's write of an object and its arrival in the mirror (last seen)",
        labels=["kind"],
    )
    values = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in raw.items()}
    for kind, value in sorted(values.items()):
        if ":" in kind:
            continue
        try:
            family.add_metric([kind], float(value))
        except (TypeError, ValueError):
            continue
    return family


class InformerLagCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        from mcm_tasks.redisdb import get_redis, rkey

        yield informer_lag(get_redis().hgetall(rkey(*INFORMER_LAG_KEY_PARTS)))  # type: ignore[arg-type]


def fleet_collectors() -> list[Collector]:
    from mcm_tasks.controllers.common.remediation_metrics_io import RemediationCollector
    from mcm_tasks.controllers.machine.metrics_io import MachineCollector
    from mcm_tasks.controllers.machinedeployment.metrics_io import MachineDeploymentMetricsCollector
    from mcm_tasks.controllers.machineset.metrics_io import MachineSetMetricsCollector
    from mcm_tasks.queue.metrics import QueueMetricsCollector
    from mcm_tasks.why_metrics import ConditionCollector, FailingAgeCollector

    return [
        QueueMetricsCollector(),
        FailingAgeCollector(),
        ConditionCollector(),
        MachineCollector(),
        MachineSetMetricsCollector(),
        MachineDeploymentMetricsCollector(),
        RemediationCollector(),
        InformerLagCollector(),
    ]


def build_registry(fleet: Callable[[], bool] | None = None) -> CollectorRegistry:
    """The registry to expose: the multiprocess view for forked workers, else the default one;
    plus the fleet metrics when ``fleet`` is given (exported while it returns True)."""
    registry = CollectorRegistry()  # one per endpoint: what it adds stays its own
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(REGISTRY)  # type: ignore[arg-type]  # the process's metrics
    registry.register(LeaderCollector())
    registry.register(RedisUpCollector())
    if fleet is not None:
        from mcm_tasks.tenant_metrics import TenantCollector

        for collector in fleet_collectors():  # in seed mode, each served namespace's, labelled
            registry.register(Guarded(TenantCollector(collector), fleet))
    return registry


def configz(settings: Settings) -> dict[str, Any]:
    """The effective settings, as MCM's ``/configz`` shows its flags; credentials left out."""
    shown = settings.model_dump(mode="json")
    for name in _HIDDEN_SETTINGS:
        shown[name] = "<hidden>"
    return shown


def _json(start_response: Callable[..., Any], ok: bool, body: dict[str, Any]) -> list[bytes]:
    start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "application/json")])
    return [json.dumps(body, indent=2).encode()]


def make_app(
    registry: CollectorRegistry, settings: Settings, probes: Probes | None = None
) -> Callable[..., Iterable[bytes]]:
    metrics_app = make_wsgi_app(registry)
    probes = probes or Probes(settings)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics_app(environ, start_response)
        if path == "/healthz":
            return _json(start_response, *probes.alive())
        if path == "/readyz":
            return _json(start_response, *probes.ready())
        if path == "/configz":
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps(configz(settings), indent=2).encode()]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found"]

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
        pass


def serve(
    settings: Settings | None = None,
    probes: Probes | None = None,
    fleet: Callable[[], bool] | None = None,
) -> WSGIServer | None:
    """Serve the endpoints on ``--address``/``--port`` in a daemon thread; ``None`` when the port
    is taken (several processes on one host), which is logged, not fatal. ``fleet``: export the
    fleet metrics while it returns True (the leading informer)."""
    settings = settings or get_settings()
    app = make_app(build_registry(fleet), settings, probes)
    try:
        server = make_server(settings.address, settings.port, app, handler_class=_QuietHandler)
    except OSError as err:
        log.warning("metrics endpoint not served on %s:%s: %s", settings.address, settings.port, err)
        return None
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    log.info("serving /metrics, /healthz, /readyz, /configz on %s:%s", settings.address, server.server_port)
    return server
