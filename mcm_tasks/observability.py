"""The endpoints every mcm-tasks process serves (MCM §8): ``/metrics``, ``/healthz``, ``/configz``.

Metrics come from three places, and one registry gathers them all:
- collectors computed at scrape time from Redis (the queue metrics, which span every process) and
  from the mirror (machine, MachineSet and MachineDeployment gauges), so any process reports the
  whole system's figures;
- counters and histograms recorded where work happens (driver calls, machine durations). A Celery
  worker runs reconciles in forked children, so for it these go through prometheus_client's
  multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``), which the worker command sets before anything
  creates a metric.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app, multiprocess

from mcm_tasks.settings import Settings, get_settings

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: settings whose values never leave the process (they may carry credentials)
_HIDDEN_SETTINGS = frozenset({"redis_url"})


def build_registry() -> CollectorRegistry:
    """The registry to expose: the multiprocess view for forked workers, else the default one,
    plus every scrape-time collector of the project."""
    from mcm_tasks.controllers.machine.metrics import register_collector
    from mcm_tasks.controllers.machinedeployment.metrics import register_machine_deployment_metrics
    from mcm_tasks.controllers.machineset.metrics import register_machine_set_metrics
    from mcm_tasks.queue.metrics import register_queue_metrics

    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry = REGISTRY
    for register in (
        register_queue_metrics,
        register_collector,
        register_machine_set_metrics,
        register_machine_deployment_metrics,
    ):
        # a second serve() in one process finds them registered already
        with contextlib.suppress(ValueError):
            register(registry)
    return registry


def configz(settings: Settings) -> dict[str, Any]:
    """The effective settings, as MCM's ``/configz`` shows its flags; credentials left out."""
    shown = settings.model_dump(mode="json")
    for name in _HIDDEN_SETTINGS:
        shown[name] = "<hidden>"
    return shown


def make_app(
    registry: CollectorRegistry, settings: Settings, healthy: Callable[[], bool] = lambda: True
) -> Callable[..., Iterable[bytes]]:
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics_app(environ, start_response)
        if path == "/healthz":
            ok = healthy()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"ok" if ok else b"unhealthy"]
        if path == "/configz":
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps(configz(settings), indent=2).encode()]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found"]

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
        pass


def serve(settings: Settings | None = None, healthy: Callable[[], bool] = lambda: True) -> WSGIServer | None:
    """Serve the endpoints on ``--address``/``--port`` in a daemon thread; ``None`` when the port
    is taken (several processes on one host), which is logged, not fatal."""
    settings = settings or get_settings()
    app = make_app(build_registry(), settings, healthy)
    try:
        server = make_server(settings.address, settings.port, app, handler_class=_QuietHandler)
    except OSError as err:
        log.warning("metrics endpoint not served on %s:%s: %s", settings.address, settings.port, err)
        return None
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    log.info("serving /metrics, /healthz, /configz on %s:%s", settings.address, server.server_port)
    return server
