"""Metrics that add up across pods: error codes are names, a NotFound that answers the call is not a
failure, and a worker's per-process series carry no ``pid`` label."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from providers.errors import Code, MachineError
from providers.metrics import failure_code


@pytest.mark.parametrize(
    ("operation", "error", "label"),
    [
        ("create_machine", MachineError(Code.ResourceExhausted, "quota"), "ResourceExhausted"),
        ("create_machine", MachineError(Code.NotFound, "no image"), "NotFound"),
        ("create_machine", RuntimeError("bug"), "Internal"),
        ("delete_machine", MachineError(Code.NotFound, "gone"), None),
        ("get_machine_status", MachineError(Code.NotFound, "not yet"), None),
        ("delete_machine", MachineError(Code.Unavailable, "later"), "Unavailable"),
    ],
)
def test_failure_code_label(operation: str, error: Exception, label: str | None) -> None:
    assert failure_code(operation, error) == label


_CHILD = """
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from mcm_tasks.controllers.common.metrics import FAILED_JOINS
FAILED_JOINS.inc()
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print(generate_latest(registry).decode())
"""


def test_failed_joins_in_multiprocess_mode_have_no_pid_label(tmp_path: Path) -> None:
    """A worker's pool processes write files the main process sums; the series keeps its plain name."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("mcm_machine_num_failed_join")]
    assert lines == ["mcm_machine_num_failed_join 1.0"]
