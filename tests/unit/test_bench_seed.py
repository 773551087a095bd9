"""bench/seed.py's choices that need no seed: the sizes of ``--quick``, where a run's figures go (a
quick or smaller run never replaces bench/results/seed.json), the fairness quantiles by nearest
rank; and ``make demo SHOOTS=N`` reaching the seed demo while plain ``make demo`` does not."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.seed import QUICK, RESULTS, out_path, parse_args, quantiles, shoot_names

ROOT = Path(__file__).resolve().parents[2]


def test_quick_takes_its_sizes_unless_one_is_given() -> None:
    quick = parse_args(["--quick"])
    assert (quick.shoots, quick.machines, quick.idle_minutes) == (QUICK["shoots"], QUICK["machines"], 0.5)
    assert parse_args(["--quick", "--shoots", "3"]).shoots == 3
    assert parse_args(["--quick", "--idle-minutes=2"]).idle_minutes == 2.0
    full = parse_args([])
    assert (full.shoots, full.machines, full.workers, full.fairness_samples) == (50, 20, 2, 20)
    assert full.idle_minutes == 10.0 and full.fairness_machines == 1000


def test_fairness_needs_a_busy_and_a_quiet_namespace() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--shoots", "1"])


def test_only_the_full_run_writes_bench_results_seed_json(tmp_path: Path) -> None:
    assert out_path(parse_args([])) == RESULTS / "seed.json"
    for argv in (["--quick"], ["--shoots", "10"], ["--machines", "5"]):
        assert out_path(parse_args(argv)).parent != RESULTS, argv
    assert out_path(parse_args(["--quick", "--out", str(tmp_path / "q.json")])) == tmp_path / "q.json"


def test_fairness_quantiles_by_nearest_rank() -> None:
    twenty = quantiles([float(i) for i in range(20, 0, -1)])
    assert twenty == {"count": 20, "p50": 10.0, "p99": 20.0, "max": 20.0}  # of 20, p99 is the largest
    hundred = quantiles([float(i) for i in range(1, 101)])
    assert (hundred["p50"], hundred["p99"], hundred["max"]) == (50.0, 99.0, 100.0)


def test_shoot_names_sort_in_creation_order() -> None:
    names = shoot_names(12)
    assert names == sorted(names) and len(set(names)) == 12


def make_demo(*variables: str) -> str:
    done = subprocess.run(["make", "-n", "demo", *variables], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return next(line for line in done.stdout.splitlines() if "mcm_sandbox.demo" in line)


def test_make_demo_shoots_runs_the_seed_demo() -> None:
    assert "--shoots 5" in make_demo("SHOOTS=5")
    assert "--shoots" not in make_demo()
    assert "--keep" in make_demo("SHOOTS=2", "KEEP=1")
