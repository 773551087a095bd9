"""Render helm/mcm-tasks for the chart's tests, as `helm template` prints it.

The engine is `helm` when it is on PATH, else tools/chart-render (Go's text/template + sprig, the
engine Helm uses), built on demand by `make build/chart-render` from Debian's Go packages. A machine
that has neither and cannot build the renderer (no apt-get, not root: macOS, a laptop) skips the
chart's tests with one line saying why, so `make test` does not need apt for everything; with
``CI=true`` they are required and fail instead."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "mcm-tasks"
RENDERER = ROOT / "build" / "chart-render"
VALUE_SETS = sorted((CHART / "ci").glob("*.yaml"))
#: what tools/chart-render assumes when not told, given to helm too so both render alike
DEFAULTS = {"--namespace": "default", "--release-name": "mcm-tasks", "--kube-version": "v1.30.0"}


class RenderError(Exception):
    """The chart refused the values (schema or a template's fail)."""


@dataclass(frozen=True)
class Engine:
    """The renderer found: ``helm`` or ``chart-render`` at ``path``; ``why`` when there is none."""

    name: str
    path: Path | None = None
    why: str = ""


@functools.cache
def engine() -> Engine:
    helm = shutil.which("helm")
    if helm:
        return Engine("helm", Path(helm))
    if not RENDERER.exists():
        try:
            built = subprocess.run(
                ["make", "--no-print-directory", "-s", "-C", str(ROOT), "build/chart-render"],
                capture_output=True,
                text=True,
            )
        except FileNotFoundError:
            return Engine("none", why="no make on PATH to build the renderer")
        if built.returncode != 0 or not RENDERER.exists():
            # the recipe's own reason, not make's "Error 1" that follows it
            lines = [line for line in (built.stderr or built.stdout).splitlines() if line.strip()]
            reasons = [line for line in lines if not line.startswith("make")] or lines
            return Engine("none", why=reasons[-1] if reasons else f"make exited {built.returncode}")
    return Engine("chart-render", RENDERER)


def require_engine() -> Engine:
    """The engine, or skip the calling test (fail it under CI=true) saying why there is none."""
    found = engine()
    if found.name == "none":
        message = f"chart tests need helm on PATH or the chart renderer, and neither is here: {found.why}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def helm_command(helm: str, args: list[str], chart: Path) -> list[str]:
    """tools/chart-render's arguments as helm's: the release name is positional, NOTES come from a
    client-side dry-run install (``helm template`` does not print them)."""
    options = dict(DEFAULTS)
    rest: list[str] = []
    notes = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in DEFAULTS:
            options[arg] = args[i + 1]
            i += 2
            continue
        if arg == "--notes":
            notes = True
        else:
            rest.append(arg)
        i += 1
    release = options.pop("--release-name")
    if notes:
        options.pop("--kube-version")
        head = [helm, "install", release, str(chart), "--dry-run=client"]
    else:
        head = [helm, "template", release, str(chart)]
    return [*head, *(x for pair in options.items() for x in pair), *rest]


def _run(args: list[str]) -> str:
    found = require_engine()
    assert found.path is not None
    if found.name == "helm":
        cmd = helm_command(str(found.path), args, CHART)
    else:
        cmd = [str(found.path), *args, str(CHART)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RenderError(result.stderr.strip())
    return result.stdout


def render_text(values: dict[str, Any] | None = None, *args: str, tmp: Path | None = None) -> str:
    files: list[str] = []
    if values is not None:
        assert tmp is not None
        file = tmp / f"values-{len(list(tmp.glob('values-*.yaml')))}.yaml"
        file.write_text(yaml.safe_dump(values))
        files = ["-f", str(file)]
    return _run([*args, *files])


def _manifests(text: str) -> list[dict[str, Any]]:
    """The YAML documents of a render, without NOTES (and without helm install's header)."""
    text = text.split("\nNOTES:\n")[0]
    if "\nMANIFEST:\n" in text:
        text = text.split("\nMANIFEST:\n", 1)[1]
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render(values: dict[str, Any] | None = None, *args: str, tmp: Path | None = None) -> list[dict[str, Any]]:
    """The rendered manifests, as `helm template` would print them."""
    return _manifests(render_text(values, *args, tmp=tmp))


def render_file(values_file: Path, *args: str) -> list[dict[str, Any]]:
    return _manifests(_run(["-f", str(values_file), *args]))


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{kind} *{suffix}: {[d['metadata']['name'] for d in by_kind(docs, kind)]}"
    return found[0]
