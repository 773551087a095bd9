"""``--phase-cpu``: the worker-side wrappers count each part's calls and thread CPU without changing
what the wrapped functions answer, only in a worker, and the benchmark's difference over a phase
reads every process's counters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench import profiling
from bench.profiling import PHASE_CPU_PATH, PhaseCpu

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent(
    """
    from mcm_tasks.controllers.common.phases import Halt, run_phases
    from mcm_tasks.queue import Requeue

    class MachineScope:
        pass

    def _first(scope):
        return Requeue(5.0)

    def _second(scope):
        return Halt(Requeue(1.0))

    answer = run_phases(MachineScope(), (_first, _second))
    assert answer == Requeue(1.0), answer
    import logging
    logging.getLogger("x").warning("counted")
    """
)


def run(tmp_path: Path, *argv: str) -> dict[str, list[float]]:
    env = {
        **os.environ,
        "MCM_BENCH_PHASE_CPU_DIR": str(tmp_path),
        "PYTHONPATH": f"{PHASE_CPU_PATH}{os.pathsep}{ROOT}",
    }
    subprocess.run([sys.executable, "-c", PROGRAM, *argv], env=env, check=True, cwd=ROOT, timeout=120)
    files = list(tmp_path.glob("*.json"))
    return json.loads(files[0].read_text()) if files else {}


def test_a_worker_counts_each_phase_by_scope_and_its_log_records(tmp_path: Path) -> None:
    counts = run(tmp_path, "mcm_tasks.cli", "worker")
    assert counts["phase:MachineScope:_first"][0] == 1
    assert counts["phase:MachineScope:_second"][0] == 1
    assert counts["log:record"][0] == 1
    assert all(cpu >= 0 for _, cpu in counts.values())


def test_no_other_process_is_touched(tmp_path: Path) -> None:
    assert run(tmp_path, "mcm_tasks.cli", "informer") == {}


def test_a_phase_is_the_difference_summed_over_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profiling, "FLUSH_SECONDS", 0.0)
    pc = PhaseCpu(True)
    try:
        assert pc.directory is not None
        (pc.directory / "1.json").write_text(json.dumps({"api:PUT": [10, 0.01]}))
        with pc.phase("up", per=10):
            (pc.directory / "1.json").write_text(json.dumps({"api:PUT": [30, 0.03], "task": [5, 0.5]}))
            (pc.directory / "2.json").write_text(json.dumps({"api:PUT": [10, 0.01]}))
        up = pc.figures["up"]
        assert up["api:PUT"]["calls"] == 30 and up["api:PUT"]["calls_per_machine"] == 3.0
        assert up["api:PUT"]["us_per_call"] == 1000.0 and up["task"]["ms_per_machine"] == 50.0
        assert list(up) == ["task", "api:PUT"]  # the costliest first
        assert pc.environ()["PYTHONPATH"].split(os.pathsep)[0] == str(PHASE_CPU_PATH)
    finally:
        pc.close()
