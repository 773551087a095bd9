"""The fixtures the decision tests share, registered once here so that no test module imports
another for them; and the guard that keeps this folder fast (``make test-fast`` runs it whole)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcm_sandbox.procs import ApiServer, ManagedProcess
from tests.machinedeployment_support import world
from tests.machineset_support import harness
from tests.unit.machine_support import settings

__all__ = ["harness", "settings", "world"]


@pytest.fixture(autouse=True)
def no_slow_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test here may use a real Redis (its redis-server starts once per session) but may not start
    the sandbox API server or any other managed process (a worker, the informer): those tests
    belong in tests/integration/, or ``make test-fast`` stops being fast."""
    start = ManagedProcess.start

    def refuse_api_server(self: ApiServer, *args: Any, **kwargs: Any) -> ApiServer:
        raise RuntimeError("tests/unit/ runs in make test-fast: no sandbox API server here")

    def only_redis(self: ManagedProcess) -> None:
        if "redis" not in Path(self.args[0]).name:
            raise RuntimeError(
                f"tests/unit/ runs in make test-fast: no process but Redis here, not {self.args[0]}"
            )
        start(self)

    monkeypatch.setattr(ApiServer, "start", refuse_api_server)
    monkeypatch.setattr(ManagedProcess, "start", only_redis)
