"""The chart's rendered Grafana dashboard and Prometheus alert rules, read by the unit tests of the
rules and by the integration test that checks the metrics they name are exported."""

from __future__ import annotations

import json
from typing import Any

from tests.chart_support import CHART, by_kind, render_file

FULL = CHART / "ci" / "full-values.yaml"


def dashboard() -> dict[str, Any]:
    (config,) = [d for d in by_kind(rendered(), "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    return dict(json.loads(config["data"]["mcm-tasks.json"]))


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rule_groups() for r in g["rules"] if "alert" in r}


def rendered() -> list[dict[str, Any]]:
    return render_file(FULL)


def rule_groups() -> list[dict[str, Any]]:
    (rule,) = by_kind(rendered(), "PrometheusRule")
    return list(rule["spec"]["groups"])
