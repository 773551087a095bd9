"""Every metric the chart's Grafana dashboard and PrometheusRule query exists on a live ``/metrics``
(the endpoint every process serves, with the fleet metrics of a leading informer and the process
metrics a worker registers), against a real Redis. A renamed metric fails here, not on a blank panel
or a silent alert."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import pytest

import providers.metrics  # noqa: F401  # a worker registers the cloud API metrics at import
from mcm_sandbox.procs import free_port
from mcm_tasks.controllers.machine import metrics as machine_metrics  # noqa: F401  # durations
from mcm_tasks.observability import serve
from mcm_tasks.probes import LEADING
from mcm_tasks.settings import configure, reset_settings
from tests.monitoring_support import alerts, dashboard

pytestmark = pytest.mark.integration

#: what a family's samples are called beyond its name, by type
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}


@pytest.fixture()
def exposition(redis_url: str) -> Iterator[str]:
    port = free_port()
    server = serve(
        configure({"redis_url": redis_url, "port": port, "address": "127.0.0.1"}), fleet=lambda: True
    )
    assert server is not None
    LEADING.update({"informer": True, "beat": True})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            yield resp.read().decode()
    finally:
        LEADING.clear()
        server.shutdown()
        reset_settings()


def exported(text: str) -> set[str]:
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            names.update(name + suffix for suffix in SUFFIXES.get(kind, ()))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def queried(expr: str) -> set[str]:
    """The metric names in a PromQL expression: ours all begin with ``mcm_``; label matchers and
    strings are dropped first so a label value cannot pass for a name."""
    bare = re.sub(r"\{[^}]*\}", "", re.sub(r'"[^"]*"', "", expr))
    return set(re.findall(r"\b(mcm_[a-zA-Z0-9_:]+)\b", bare))


def test_every_queried_metric_is_exported(exposition: str) -> None:
    names = exported(exposition)
    assert "mcm_redis_up 1.0" in exposition, "the scrape's PING reached the test's Redis"
    used: dict[str, set[str]] = {}
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            for metric in queried(target["expr"]):
                used.setdefault(metric, set()).add(f"panel {panel['title']!r}")
    for name, rule in alerts().items():
        for metric in queried(rule["expr"]):
            used.setdefault(metric, set()).add(f"alert {name}")
    assert len(used) >= 15, used
    missing = {metric: where for metric, where in used.items() if metric not in names}
    assert not missing, f"queried but not on /metrics: {missing}"


def test_the_name_extraction_sees_through_labels() -> None:
    assert queried('sum by (name) (rate(mcm_a_total{name="mcm_b"}[5m])) > mcm_c') == {"mcm_a_total", "mcm_c"}
