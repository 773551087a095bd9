"""A worker or informer process holds the modules it runs, not every part of what it could run
(issue 28: memory at rest; mcm_tasks/import_weight.py, mcm_tasks/cli.py).

Each check runs in a fresh interpreter: what a process imports depends on what ran before."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

import pytest


def _run(code: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


#: what no controller process runs: the client's dynamic client, websocket stream and their
#: dependencies, the admin CLI (rich tables), beat's scheduler, the informers, the sandbox
NOT_RUN_BY_A_WORKER = [
    "kubernetes.dynamic", "kubernetes.stream", "kubernetes.leaderelection", "kubernetes_validate",
    "jsonschema", "websocket", "mcm_tasks.admin.cli", "rich", "redbeat", "informers", "mcm_sandbox",
]  # fmt: skip


def _loaded_by(word: str, runs: str, modules: list[str]) -> list[str]:
    """Which of ``modules`` a fresh process holds once the command ``word`` is mounted and the
    modules it ``runs`` are imported."""
    found = _run(
        "import json, sys\n"
        f"from mcm_tasks.cli import build_app\nbuild_app({word!r})\n{runs}"
        f"print(json.dumps({{'loaded': [m for m in {modules!r} if m in sys.modules]}}))"
    )
    loaded: list[str] = found["loaded"]  # type: ignore[assignment]
    return loaded


def test_a_worker_imports_what_it_runs_and_no_other_command() -> None:
    runs = (
        "import mcm_tasks.celery_app, mcm_tasks.tasks, mcm_tasks.controllers.reconcilers\n"
        "import mcm_tasks.kube.clients, mcm_tasks.kube.credentials_io\n"
    )
    assert _loaded_by("worker", runs, NOT_RUN_BY_A_WORKER) == []


def test_the_informer_command_does_not_import_the_admin_cli_or_the_worker() -> None:
    held = ["mcm_tasks.admin.cli", "mcm_tasks.worker_cli", "rich", "kubernetes.dynamic", "mcm_sandbox"]
    assert _loaded_by("informer", "", held) == []


def test_the_client_parts_still_load_when_named() -> None:
    found = _run(
        "import json, sys\n"
        "import mcm_tasks, kubernetes\n"
        "deferred = 'kubernetes.watch' not in sys.modules\n"
        "from kubernetes import watch\n"
        "from kubernetes.client import ApiClient, CoreV1Api\n"
        "import kubernetes.dynamic\n"
        "try:\n"
        "    kubernetes.no_such_part\n"
        "    missing = 'no error'\n"
        "except AttributeError as e:\n"
        "    missing = str(e)\n"
        "print(json.dumps({'deferred': deferred, 'watch': watch.Watch.__name__,\n"
        "                  'config': callable(kubernetes.config.load_kube_config),\n"
        "                  'dynamic': kubernetes.dynamic.DynamicClient.__name__,\n"
        "                  'client': kubernetes.client.CoreV1Api is CoreV1Api,\n"
        "                  'version': kubernetes.__version__, 'missing': missing}))"
    )
    assert found == {
        "deferred": True,
        "watch": "Watch",
        "config": True,
        "dynamic": "DynamicClient",
        "client": True,
        "version": version("kubernetes"),
        "missing": "module 'kubernetes' has no attribute 'no_such_part'",
    }


def test_a_client_imported_first_is_left_as_it_is() -> None:
    found = _run(
        "import json, sys\n"
        "import kubernetes\n"
        "from mcm_tasks.import_weight import defer_kubernetes_parts\n"
        "deferred = defer_kubernetes_parts()\n"
        "print(json.dumps({'deferred': deferred, 'eager': 'kubernetes.dynamic' in sys.modules}))"
    )
    assert found == {"deferred": False, "eager": True}


@pytest.mark.parametrize("word", ["worker", "admin", "informer", "beat"])
def test_each_command_line_gets_its_own_sub_command(word: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mcm_tasks.cli", word, "--help"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert f"Example: mcm-tasks {word}" in out.stdout
