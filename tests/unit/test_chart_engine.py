"""How the chart's tests find a renderer: helm's command line translated from tools/chart-render's,
and a machine with neither skipping them with one line saying why, except under CI=true."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import chart_support
from tests.chart_support import Engine, helm_command

CHART = Path("/c")


def test_helm_template_gets_the_renderers_defaults() -> None:
    assert helm_command("helm", ["--include-crds", "-f", "v.yaml"], CHART) == [
        "helm",
        "template",
        "mcm-tasks",
        "/c",
        "--namespace",
        "default",
        "--kube-version",
        "v1.30.0",
        "--include-crds",
        "-f",
        "v.yaml",
    ]


def test_release_name_becomes_positional_and_namespace_is_kept() -> None:
    cmd = helm_command("helm", ["--namespace", "ns", "--release-name", "r1"], CHART)
    assert cmd[:4] == ["helm", "template", "r1", "/c"]
    assert cmd[cmd.index("--namespace") + 1] == "ns"
    assert "--release-name" not in cmd


def test_notes_come_from_a_client_dry_run_install() -> None:
    cmd = helm_command("helm", ["--notes"], CHART)
    assert cmd[:5] == ["helm", "install", "mcm-tasks", "/c", "--dry-run=client"]
    assert "--notes" not in cmd and "--kube-version" not in cmd


def test_no_engine_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chart_support, "engine", lambda: Engine("none", why="no apt-get"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="neither is here: no apt-get"):
        chart_support.require_engine()


def test_no_engine_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chart_support, "engine", lambda: Engine("none", why="no apt-get"))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no apt-get"):
        chart_support.require_engine()
