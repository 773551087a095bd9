"""Render helm/mcm-tasks with tools/chart-render (Go's text/template + sprig, as Helm), for the
chart's tests. The renderer is built by `make build/chart-render` (make test does it first)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "mcm-tasks"
RENDERER = ROOT / "build" / "chart-render"
VALUE_SETS = sorted((CHART / "ci").glob("*.yaml"))


class RenderError(Exception):
    """The chart refused the values (schema or a template's fail)."""


def renderer() -> Path:
    if not RENDERER.exists():
        subprocess.run(["make", "-C", str(ROOT), "build/chart-render"], check=True, capture_output=True)
    return RENDERER


def render_text(values: dict[str, Any] | None = None, *args: str, tmp: Path | None = None) -> str:
    cmd = [str(renderer()), *args]
    if values is not None:
        assert tmp is not None
        file = tmp / f"values-{len(list(tmp.glob('values-*.yaml')))}.yaml"
        file.write_text(yaml.safe_dump(values))
        cmd += ["-f", str(file)]
    result = subprocess.run([*cmd, str(CHART)], capture_output=True, text=True)
    if result.returncode != 0:
        raise RenderError(result.stderr.strip())
    return result.stdout


def render(values: dict[str, Any] | None = None, *args: str, tmp: Path | None = None) -> list[dict[str, Any]]:
    """The rendered manifests, as `helm template` would print them."""
    text = render_text(values, *args, tmp=tmp).split("\nNOTES:\n")[0]
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render_file(values_file: Path, *args: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(renderer()), "-f", str(values_file), *args, str(CHART)], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RenderError(result.stderr.strip())
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{kind} *{suffix}: {[d['metadata']['name'] for d in by_kind(docs, kind)]}"
    return found[0]
