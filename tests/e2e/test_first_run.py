"""The first run as a new user meets it: `make demo` says what starts, shows the fleet while it
rolls and ends with a summary; `sandbox up` never silently replaces a running sandbox."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import STATE_FILE, down, running_pids

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

MCM_TASKS = str(Path(sys.executable).with_name("mcm-tasks"))


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("MCM_")}, "COLUMNS": "160"}


def test_demo_shows_progress_fleet_and_summary(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mcm_sandbox.demo", "--dir", str(tmp_path / "demo")],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=480,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    for progress in ("redis-server on", "control API server on", "CRDs registered", "informer synced"):
        assert progress in out, progress
    # the fleet view: machines by phase per MachineSet, with both classes during the rollout
    assert "MachineSet" in out and "Running" in out and "demo-small" in out and "demo-large" in out
    assert "summary" in out and "sandbox started in" in out and "next steps" in out
    assert "demo finished" in out
    assert not running_pids(tmp_path / "demo")


def test_a_killed_demo_stops_its_sandbox(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    out = tmp_path / "demo.out"
    with open(out, "wb") as sink:
        demo = subprocess.Popen(
            [sys.executable, "-m", "mcm_sandbox.demo", "--dir", str(directory)],
            env=_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        # past start-up: the demo is driving the fleet when the terminal closes
        wait_until(
            lambda: "sandbox up in" in out.read_text(), 120, interval=0.2, what="the demo's sandbox up"
        )
        assert running_pids(directory)
        demo.send_signal(signal.SIGHUP)  # the terminal closed
        assert demo.wait(60) != 0
        assert not running_pids(directory)
    finally:
        if demo.poll() is None:
            demo.kill()
        if (directory / STATE_FILE).exists():
            down(directory, echo=lambda _: None)


def test_sandbox_up_refuses_a_running_sandbox_unless_forced(tmp_path: Path) -> None:
    directory = tmp_path / "sb"
    up = [MCM_TASKS, "sandbox", "up", "--dir", str(directory), "--workers", "1", "--no-beat"]
    try:
        first = subprocess.run(up, env=_env(), capture_output=True, text=True, timeout=180)
        assert first.returncode == 0, first.stdout + first.stderr
        before = running_pids(directory)
        assert before
        env_file = (directory / "env").read_text()
        assert f"export KUBECONFIG={directory.resolve() / 'kubeconfig'}" in env_file

        again = subprocess.run(up, env=_env(), capture_output=True, text=True, timeout=60)
        assert again.returncode == 1
        assert "already running" in again.stderr and "--force" in again.stderr
        assert running_pids(directory) == before, "the running sandbox must be left alone"

        forced = subprocess.run([*up, "--force"], env=_env(), capture_output=True, text=True, timeout=180)
        assert forced.returncode == 0, forced.stdout + forced.stderr
        after = running_pids(directory)
        assert after and not set(after.values()) & set(before.values())
    finally:
        if (directory / STATE_FILE).exists():
            down(directory, echo=lambda _: None)
