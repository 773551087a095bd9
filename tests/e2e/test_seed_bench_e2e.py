"""bench/seed.py end to end at the smallest size: it scales every namespace at once, samples
fairness while one namespace is busy, measures the seed at rest and a single-namespace installation
beside it, and saves every figure issue 33 names where ``--out`` says (never bench/results/seed.json
from a small run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]


def test_a_tiny_seed_bench_saves_the_issues_figures(tmp_path: Path) -> None:
    out = tmp_path / "seed.json"
    sizes = "--shoots 2 --machines 2 --fairness-machines 6 --fairness-samples 3 --fairness-interval 0.1"
    windows = "--idle-minutes 0.05 --settle-minutes 0 --single-idle-minutes 0 --no-calibration --timeout 120"
    args = [*sizes.split(), *windows.split(), "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCM_")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "seed.py"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=420,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    figures = json.loads(out.read_text())
    assert (figures["shoots"], figures["machines_per_shoot"], figures["machines"]) == (2, 2, 4)
    assert figures["scale_up_seconds"] > 0 and "seed_scale_up_1000_seconds" not in figures
    assert figures["writes_per_machine_up"] > 0 and figures["tasks_per_machine_up"] > 0
    assert figures["cpu_ms_per_machine_up"] > 0
    assert figures["fairness_samples"] == 3
    assert (
        0
        < figures["fairness_p50_seconds"]
        <= figures["fairness_p99_seconds"]
        <= figures["fairness_max_seconds"]
    )
    assert figures["idle_pss_mb_seed"] > 0 and figures["idle_cpu_percent_seed"] >= 0
    assert figures["single_installs_pss_mb"] == pytest.approx(2 * figures["single_install_pss_mb"], abs=0.1)
    assert "calibration_cpu_ms_per_empty_task" in figures
    ctx = figures["context"]
    # our processes: Redis, the informer (with beat), the workers; the local cloud's Redis is apart
    assert set(ctx["idle"]["memory"]["roles"]) == {"redis", "informer", "worker-0", "worker-1"}
    assert "cloud-redis" in ctx["layout"]["processes"]
    # the writes are the control cluster's and each shoot's
    assert {"control", "shoot-001", "shoot-002"} <= set(ctx["scale_up"]["writes"])
    assert ctx["scale_up"]["writes"]["shoot-001"] > 0
    assert {s["namespace"] for s in ctx["fairness"]["samples"]} == {"shoot-002"}
