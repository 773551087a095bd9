"""``make demo SHOOTS=N`` (``mcm_sandbox.demo --shoots N``): the demo in seed mode runs its steps on
every shoot namespace and stops every process of the seed when it ends; with ``--keep`` it stays
until a signal, says how to look at the seed, and then stops it too."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mcm_sandbox.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("MCM_")}, "COLUMNS": "160"}


def _descendants(pid: int) -> dict[psutil.Process, str]:
    """A process's descendants now, with their command lines."""
    found: dict[psutil.Process, str] = {}
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                command = " ".join(child.cmdline())
                if command:  # a zombie's is empty: it must not replace what was seen of it
                    found[child] = command
    return found


def _alive(procs: dict[psutil.Process, str]) -> list[str]:
    alive = []
    for proc, command in procs.items():
        with contextlib.suppress(psutil.Error):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{proc.pid} {command}")
    return alive


def _roles(procs: dict[psutil.Process, str]) -> bool:
    commands = " ".join(procs.values())
    return all(role in commands for role in ("informer", "worker", "kubelet", "redis-server", "apiserver"))


def _demo(directory: Path, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(out, "wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "mcm_sandbox.demo", "--shoots", "2", "--dir", str(directory), *extra],
            env=_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def test_the_seed_demo_serves_every_shoot_and_stops_its_processes(tmp_path: Path) -> None:
    out = tmp_path / "demo.out"
    demo = _demo(tmp_path / "demo", out)
    seen: dict[psutil.Process, str] = {}
    try:
        deadline = time.monotonic() + 300
        while demo.poll() is None:  # the seed's processes, collected while it runs
            assert time.monotonic() < deadline, out.read_text()[-3000:]
            seen.update(_descendants(demo.pid))
            time.sleep(0.2)
    finally:
        if demo.poll() is None:
            demo.kill()
    text = out.read_text()
    assert demo.returncode == 0, text[-5000:]
    assert "a seed of 2 shoots" in text and "seed up in" in text
    for step in ("a MachineDeployment of 2 in each of 2 shoots", "scale shoot-1 to 5", "delete every shoot"):
        assert step in text, step
    assert "shoot-1" in text and "shoot-2" in text and "7 machines, 2 shoots" in text
    assert "summary" in text and "KEEP=1" in text
    assert _roles(seen), seen
    wait_until(lambda: not _alive(seen), 10, what="the seed's processes gone")


def test_the_kept_seed_demo_says_how_to_look_and_stops_on_a_signal(tmp_path: Path) -> None:
    directory, out = tmp_path / "demo", tmp_path / "demo.out"
    demo = _demo(directory, out, "--keep")
    try:
        wait_until(lambda: "runs until Ctrl-C" in out.read_text(), 300, interval=0.2, what="the kept seed")
        seen = _descendants(demo.pid)
        assert _roles(seen), seen
        text = out.read_text()
        assert "7 machines, 2 shoots" in text and "delete every shoot" not in text
        for hint in ("how to look at the seed", "kubectl get mcd,mcs,mc -A", "shoot-1.kubeconfig",
                     "admin queues", "admin seed", "flower"):  # fmt: skip
            assert hint in text, hint
        # the env file it names reaches the seed: the admin CLI lists both shoots as served
        exports = dict(
            shlex.split(line.removeprefix("export "))[0].split("=", 1)
            for line in (directory / "env").read_text().splitlines()
        )
        assert {"KUBECONFIG", "MCM_REDIS_URL", "MCM_NAMESPACE_SELECTOR"} <= set(exports)
        mcm_tasks = str(Path(sys.executable).with_name("mcm-tasks"))
        served = subprocess.run(
            [mcm_tasks, "admin", "seed"],
            env={**_env(), **exports},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert served.returncode == 0 and "shoot-1" in served.stdout and "shoot-2" in served.stdout, served
        demo.send_signal(signal.SIGINT)  # Ctrl-C
        assert demo.wait(60) == 128 + signal.SIGINT
        wait_until(lambda: not _alive(seen), 10, what="the seed's processes gone")
    finally:
        if demo.poll() is None:
            demo.kill()
