"""The chart's Grafana dashboard and PrometheusRule: the dashboard is valid Grafana dashboard JSON
(against the dashboard model's schema, ``tests/schemas/grafana-dashboard.schema.json``) with panels
that do not overlap; the rules pass ``promtool check rules``; each alert fires in a ``promtool test
rules`` case that recreates its cause and stays quiet in the healthy case beside it. Every metric
they query exists on a live ``/metrics``: ``tests/integration/test_monitoring_metrics.py``.

promtool comes from Debian's prometheus package (``make promtool``); without it these tests skip
with that reason, except in CI (``CI=true``), where they fail."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart_support import ROOT
from tests.monitoring_support import alerts, dashboard, rule_groups

SCHEMA = ROOT / "tests" / "schemas" / "grafana-dashboard.schema.json"
NS = "default"  # the renderer's release namespace

#: per alert: the input series that recreate its cause, the healthy series beside them, the minute at
#: which it must fire and the labels the alert then carries (beyond alertname and severity)
CASES: dict[str, dict[str, Any]] = {
    "MCMTasksNoInformerLeader": {
        "cause": [(f'mcm_leader{{component="informer",namespace="{NS}",pod="informer-0"}}', "0x15")],
        "healthy": [(f'mcm_leader{{component="informer",namespace="{NS}",pod="informer-0"}}', "1x15")],
        "at": 10, "labels": {},
    },
    "MCMTasksNoBeatLeader": {
        "cause": [],  # no beat scraped at all: absent()
        "healthy": [(f'mcm_leader{{component="beat",namespace="{NS}",pod="beat-0"}}', "1x15")],
        "at": 10, "labels": {"component": "beat", "namespace": NS},
    },
    "MCMTasksFailingKeys": {
        "cause": [(f'mcm_workqueue_longest_failing_seconds{{name="machine",namespace="{NS}"}}', "0+60x30")],
        "healthy": [(f'mcm_workqueue_longest_failing_seconds{{name="machine",namespace="{NS}"}}', "0x30")],
        "at": 20, "labels": {"name": "machine"},
    },
    "MCMTasksQueueBacklog": {
        "cause": [(f'mcm_workqueue_depth{{name="machineset",namespace="{NS}"}}', "500x30")],
        "healthy": [(f'mcm_workqueue_depth{{name="machineset",namespace="{NS}"}}', "3x30")],
        "at": 20, "labels": {"name": "machineset"},
    },
    "MCMTasksMachineControllerFrozen": {
        "cause": [(f'mcm_machine_controller_frozen{{namespace="{NS}"}}', "1x30")],
        "healthy": [(f'mcm_machine_controller_frozen{{namespace="{NS}"}}', "0x30")],
        "at": 20, "labels": {},
    },
    "MCMTasksMachinesNotRunning": {
        "cause": [(f'mcm_machine_current_status_phase{{name="m1",namespace="{NS}"}}', "-3+0x70")],
        "healthy": [(f'mcm_machine_current_status_phase{{name="m1",namespace="{NS}"}}', "1x70")],
        "at": 70, "labels": {"name": "m1", "namespace": NS},
    },
    "MCMTasksDeploymentFrozen": {
        "cause": [(f'mcm_machine_deployment_status_condition{{condition="Frozen",name="md",'
                   f'exported_namespace="shoot",namespace="{NS}"}}', "1x10")],
        "healthy": [(f'mcm_machine_deployment_status_condition{{condition="Frozen",name="md",'
                     f'exported_namespace="shoot",namespace="{NS}"}}', "0x10")],
        "at": 10, "labels": {"name": "md", "exported_namespace": "shoot"},
    },
    "MCMTasksRolloutPastProgressDeadline": {
        "cause": [(f'mcm_machine_deployment_status_condition{{condition="Progressing",name="md",'
                   f'exported_namespace="shoot",namespace="{NS}"}}', "1 1 0x10")],
        "healthy": [(f'mcm_machine_deployment_status_condition{{condition="Progressing",name="md",'
                     f'exported_namespace="shoot",namespace="{NS}"}}', "1x10")],
        "at": 6, "labels": {"name": "md", "exported_namespace": "shoot"},
    },
    "MCMTasksRemediationBlocked": {
        "cause": [(f'mcm_remediation_blocked{{name="md",exported_namespace="shoot",reason="ZoneUnhealthy",'
                   f'namespace="{NS}",pod="worker-0"}}', "1x30"),
                  (f'mcm_remediation_blocked{{name="md",exported_namespace="shoot",reason="ZoneUnhealthy",'
                   f'namespace="{NS}",pod="worker-1"}}', "1x30")],
        "healthy": [(f'mcm_remediation_blocked{{name="md",exported_namespace="shoot",reason="",'
                     f'namespace="{NS}",pod="worker-0"}}', "0x30")],
        "at": 20, "labels": {"name": "md", "exported_namespace": "shoot", "reason": "ZoneUnhealthy"},
    },
    "MCMTasksRedisUnreachable": {
        "cause": [(f'mcm_redis_up{{namespace="{NS}",pod="worker-0"}}', "1 0x10"),
                  (f'mcm_redis_up{{namespace="{NS}",pod="informer-0"}}', "1x10")],
        "healthy": [(f'mcm_redis_up{{namespace="{NS}",pod="worker-0"}}', "1x10")],
        "at": 5, "labels": {"pod": "worker-0"},
    },
}  # fmt: skip


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is not on PATH in CI: `make test` runs `make promtool` first")
        pytest.skip("promtool not on PATH: `make promtool` installs Debian's prometheus package")
    return found


def test_the_dashboard_is_grafana_dashboard_json() -> None:
    found = dashboard()
    jsonschema.validate(found, json.loads(SCHEMA.read_text()))
    ids = [p["id"] for p in found["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    cells: set[tuple[int, int]] = set()
    for p in found["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine


def test_the_schema_refuses_what_grafana_would_ignore() -> None:
    """The schema is strict enough to catch a misspelt field (so the test above can fail)."""
    found = dashboard()
    found["panels"][1]["gridpos"] = found["panels"][1].pop("gridPos")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(found, json.loads(SCHEMA.read_text()))


def test_every_alert_has_a_promtool_case() -> None:
    assert set(alerts()) == set(CASES), "an alert without its promtool case, or a case without its alert"


def test_the_rules_pass_promtool_check(tmp_path: Path) -> None:
    tool = promtool()
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups()}))
    done = subprocess.run([tool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def _expanded(text: str, labels: dict[str, str]) -> str:
    """An annotation as Prometheus renders it for an alert with ``labels`` (only ``$labels.x`` used)."""
    return re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), text)


def _series(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"series": s, "values": v} for s, v in pairs]


def test_each_alert_fires_on_its_cause_and_not_without_it(tmp_path: Path) -> None:
    tool = promtool()
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups()}))
    tests = []
    for name, rule in alerts().items():
        case = CASES[name]
        labels = {**case["labels"], **rule.get("labels", {})}
        annotations = {k: _expanded(v, labels) for k, v in rule["annotations"].items()}
        at = f"{case['at']}m"
        tests.append({
            "interval": "1m", "input_series": _series(case["cause"]),
            "alert_rule_test": [{"eval_time": at, "alertname": name,
                                 "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations}]}],
        })  # fmt: skip
        tests.append({
            "interval": "1m", "input_series": _series(case["healthy"]),
            "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": []}],
        })  # fmt: skip
    spec = tmp_path / "tests.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}))
    done = subprocess.run([tool, "test", "rules", str(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_links_to_its_runbook_section() -> None:
    page = (ROOT / "docs" / "operate" / "runbooks.md").read_text()
    for name, rule in alerts().items():
        assert rule["annotations"]["runbook_url"].endswith("#" + name.lower()), name
        assert f"\n## {name}\n" in page, f"docs/operate/runbooks.md has no section for {name}"


#: seed mode: the tenant's ``namespace`` label arrives as ``exported_namespace`` (the scrape target's
#: ``namespace`` is the release's); the per-tenant alerts fire for the tenant, not the installation
SEED_CASES: dict[str, dict[str, Any]] = {
    "MCMTasksFailingKeys": {
        "series": [(f'mcm_workqueue_longest_failing_seconds{{name="machine",exported_namespace="shoot--a",'
                    f'namespace="{NS}"}}', "0+60x30"),
                   (f'mcm_workqueue_longest_failing_seconds{{name="machine",exported_namespace="shoot--b",'
                    f'namespace="{NS}"}}', "0x30")],
        "at": 20, "labels": {"name": "machine", "exported_namespace": "shoot--a"},
    },
    "MCMTasksMachineControllerFrozen": {
        "series": [(f'mcm_machine_controller_frozen{{exported_namespace="shoot--a",namespace="{NS}"}}',
                    "1x30"),
                   (f'mcm_machine_controller_frozen{{exported_namespace="shoot--b",namespace="{NS}"}}',
                    "0x30")],
        "at": 20, "labels": {"exported_namespace": "shoot--a"},
    },
}  # fmt: skip


def test_in_seed_mode_the_tenant_alerts_name_the_tenant(tmp_path: Path) -> None:
    tool = promtool()
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups()}))
    found = alerts()
    tests = []
    for name, case in SEED_CASES.items():
        labels = {**case["labels"], **found[name].get("labels", {})}
        annotations = {k: _expanded(v, labels) for k, v in found[name]["annotations"].items()}
        tests.append({
            "interval": "1m", "input_series": _series(case["series"]),
            "alert_rule_test": [{"eval_time": f"{case['at']}m", "alertname": name,
                                 "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations}]}],
        })  # fmt: skip
    spec = tmp_path / "tests.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}))
    done = subprocess.run([tool, "test", "rules", str(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
