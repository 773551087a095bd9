"""The benchmarks' per-machine figures count what issue 19 says: our processes' CPU only, the
controller's writes only, and profiles whichever name the task entry frame has."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

from bench.figures import (
    TICK,
    Snapshot,
    against_baseline,
    calibration_figures,
    named_by_count,
    ours,
    phase_report,
    ratios_per_c,
)
from bench.profiling import summarize
from mcm_tasks.logs import TEXT_FORMAT


def snap(cpu: dict[str, float], rv: int, own: int, kubelet: int, commands: int) -> Snapshot:
    queues = {"machine": {"reconciles": rv / 10, "adds": 0.0, "retries": 0.0, "work_seconds": 0.0}}
    return Snapshot(
        0.0, {"control": rv}, queues, Counter(register=kubelet), Counter(control=own), Counter(), Counter(),
        cpu, commands,
    )  # fmt: skip


def test_our_roles_exclude_the_stand_ins_for_kubernetes() -> None:
    assert [r for r in ("redis", "informer", "worker-0", "worker-11", "beat") if not ours(r)] == []
    assert [r for r in ("apiserver-control", "apiserver-target", "kubelet", "benchmark") if ours(r)] == []


def test_phase_report_counts_our_cpu_and_the_controllers_writes_per_machine() -> None:
    start = {"redis": 1.0, "worker-0": 2.0, "informer": 0.0, "kubelet": 1.0, "apiserver-control": 5.0}
    end = {"redis": 2.0, "worker-0": 4.0, "informer": 1.0, "kubelet": 9.0, "apiserver-control": 50.0}
    before, after = snap(start, 100, 1, 0, 10), snap(end, 200, 2, 9, 70)
    report = phase_report(before, after, machines=10)
    assert report["cpu_ms_per_machine"] == 400.0  # (1 + 2 + 1) s over 10 machines
    assert report["writes"]["by_controller"] == 90 and report["writes_per_machine"] == 9.0
    assert report["tasks_per_machine"] == 1.0 and report["redis_commands_per_machine"] == 6.0


def test_profile_summary_reads_both_names_of_the_task_entry(tmp_path: Path) -> None:
    outer = "main (celery/worker.py:1)"
    sample = tmp_path / "w.txt"
    sample.write_text(
        f"{outer};deliver (/x/mcm_tasks/queue/processing.py:70);run (/x/mcm_tasks/controllers/a.py:3) 3\n"
        f"{outer};process (/x/mcm_tasks/queue/processing.py:61);run (/x/mcm_tasks/controllers/a.py:3) 1\n"
        f"{outer};poll (kombu/utils/eventio.py:9) 4\n"
    )
    summary = summarize([sample])
    assert summary["samples_in_tasks"] == 4 and summary["percent_of_samples_in_tasks"] == 50.0
    assert summary["percent_by_reconciler"] == {"run (mcm_tasks/controllers/a.py)": 100.0}


def test_the_kubelet_simulators_writes_are_read_from_its_log_line() -> None:
    """Its writes are subtracted from the controller's: a format change must fail here, not in a figure."""
    args = ("register=3, status=12",)
    record = logging.LogRecord(
        "mcm_sandbox.kubelet.simulator", logging.INFO, __file__, 1, "tick: %s", args, None
    )
    line = logging.Formatter(TEXT_FORMAT).format(record)
    found = TICK.search(line)
    assert found is not None and found.group(1) == "register=3, status=12"
    assert TICK.search('{"msg": "tick: register=3", "logger": "x"}').group(1) == "register=3"  # type: ignore[union-attr]
    # the multi-cluster kubelet (mcm_sandbox/kubelet/clusters.py) names the cluster of each tick
    cluster = logging.LogRecord(
        "mcm_sandbox.kubelet.clusters", logging.INFO, __file__, 1, "tick %s: %s", ("shoot-a", *args), None
    )
    found = TICK.search(logging.Formatter(TEXT_FORMAT).format(cluster))
    assert found is not None and found.group(1) == "register=3, status=12"


def test_a_cycles_figures_are_named_by_its_machine_count() -> None:
    figures = {
        "scale_up_1000_seconds": 90.0, "scale_down_1000_seconds": 80.0, "cpu_ms_per_machine_up": 11.0,
        "writes_per_machine_down": 9.0, "tasks_per_machine": 3.1, "memory_pss_mb_1000": 900.0,
        "scale_up_1000_seconds_per_c": 111.1, "cpu_ms_per_machine_up_per_c": 13.6,
        "machines": 10000, "calibration_cpu_ms_per_empty_task": 0.81,
    }  # fmt: skip
    assert named_by_count(figures, 10000) == {
        "scale_up_10000_seconds": 90.0, "scale_down_10000_seconds": 80.0, "cpu_ms_per_machine_up_10000": 11.0,
        "writes_per_machine_down_10000": 9.0, "tasks_per_machine_10000": 3.1, "memory_pss_mb_10000": 900.0,
        "scale_up_10000_seconds_per_c": 111.1, "cpu_ms_per_machine_up_10000_per_c": 13.6,
        "machines": 10000, "calibration_cpu_ms_per_empty_task": 0.81,
    }  # fmt: skip


def test_ratios_to_the_1000_machine_baseline_say_whether_cost_stays_linear() -> None:
    big = {"cpu_ms_per_machine_up_10000": 12.6, "writes_per_machine_up_10000": 6.07}
    small = {"cpu_ms_per_machine_up": 10.5, "writes_per_machine_up": 6.07, "writes_per_machine": 15.1}
    ratios = against_baseline(big, small, 10000)
    assert ratios["cpu_up_ratio_10000_to_1000"] == 1.2
    assert ratios["writes_up_ratio_10000_to_1000"] == 1.0
    assert ratios["writes_ratio_10000_to_1000"] is None  # the big run lacks it: no ratio, no error


def test_a_calibration_before_and_after_gives_a_mean_and_a_drift() -> None:
    figures = {"cpu_ms_per_machine_up_10000": 20.0, "cpu_ms_per_machine_up_per_c_10000": 11.1}
    out = calibration_figures(figures, {"cpu_ms_per_empty_task": 1.8}, {"cpu_ms_per_empty_task": 2.2})
    assert out == {
        "calibration_cpu_ms_per_empty_task_after": 2.2,
        "calibration_cpu_ms_mean": 2.0,
        "calibration_drift": 1.22,
        "cpu_ms_per_machine_up_10000_per_c_mean": 10.0,
    }
    assert calibration_figures(figures, {}, {"cpu_ms_per_empty_task": 2.2}) == {
        "calibration_cpu_ms_per_empty_task_after": 2.2
    }
    assert calibration_figures(figures, {"cpu_ms_per_empty_task": 1.8}, {}) == {}


def test_ratios_per_c_divide_each_run_by_its_own_mean_calibration() -> None:
    """A host twice as slow during the big run doubles its ms, not its ratio per c."""
    big = {"cpu_ms_per_machine_up_10000": 40.0, "cpu_ms_per_machine_down_10000": 33.0,
           "calibration_cpu_ms_mean": 2.0}  # fmt: skip
    small = {"cpu_ms_per_machine_up": 18.0, "cpu_ms_per_machine_down": 15.0, "calibration_cpu_ms_mean": 1.0}
    assert ratios_per_c(big, small, 10000) == {
        "cpu_up_ratio_per_c_10000_to_1000": 1.11,
        "cpu_down_ratio_per_c_10000_to_1000": 1.1,
    }
    no_mean = {k: v for k, v in small.items() if k != "calibration_cpu_ms_mean"}
    assert set(ratios_per_c(big, no_mean, 10000).values()) == {None}


def test_a_figure_merged_into_a_results_file_keeps_the_files_own_figures(tmp_path: Path) -> None:
    from bench.fleet_cost import merge_into

    out = tmp_path / "scale-10000.json"
    out.write_text(json.dumps({"scale_up_10000_seconds": 380.4, "calibration_cpu_ms_per_empty_task": 1.26,
                               "context": {"date": "d"}}))  # fmt: skip
    figures = {"scale": 10.0, "informer_rss_mb_10k_pods": 358.7, "calibration_cpu_ms_per_empty_task": 1.42,
               "informer_rss_mb_10000_nodes_100000_pods": 358.7}  # fmt: skip
    merge_into(out, figures, {"load": 1}, "informer_rss_10000")
    saved = json.loads(out.read_text())
    assert saved["scale_up_10000_seconds"] == 380.4 and saved["calibration_cpu_ms_per_empty_task"] == 1.26
    assert (
        saved["informer_rss_mb_10000_nodes_100000_pods"] == 358.7 and "informer_rss_mb_10k_pods" not in saved
    )
    assert saved["context"]["date"] == "d" and saved["context"]["informer_rss_10000"]["figures"] == figures
    assert list(saved)[-1] == "context"


def test_a_phases_failed_reconciles_are_said_in_one_line_and_nothing_when_none() -> None:
    """The benchmarks print what a phase retried and the failure Events written, so a failure in an
    ordinary scale does not hide in the results file."""
    from bench.figures import failures

    quiet = {"queues": {"machine": {"reconciles": 9, "retries": 0}}, "updates_by_part": {
        "control/events ADDED SuccessfulCreate": 25}}  # fmt: skip
    assert failures(quiet) == ""
    failed = {"queues": {"machine": {"retries": 0}, "node": {"retries": 3}, "machineclass": {"retries": 1}},
              "updates_by_part": {"control/events ADDED ReconcileFailed": 1,
                                  "control/events ADDED SuccessfulCreate": 25}}  # fmt: skip
    assert failures(failed) == "failed reconciles, retried: machineclass 1, node 3; Events: 1 ReconcileFailed"
