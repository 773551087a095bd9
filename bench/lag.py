"""A rolling update under a lagging informer (issue 29 item 6): a MachineDeployment of 20 Running
machines (maxSurge 2, maxUnavailable 0, the sandbox's local provider, zero boot delay) gets a new
MachineClass, once on a sandbox whose informer sees every watch event at once and once on a sandbox
whose informer watches through ``mcm_sandbox.watchdelay`` (every watch event 3 s late, workers
writing and reading the API servers directly). The target: the lagging rollout takes at most twice
the time of the one without lag.

Run: ``.venv/bin/python bench/lag.py [--lag 3] [--replicas 20]``. Prints the figures and saves
bench/results/lag.json.

- rollout_20_seconds_no_lag / rollout_20_seconds_lag_3s: from the template change until 20
  Machines of the new class are Running and none of the old class is left.
- rollout_20_lag_ratio: the second over the first (target ≤ 2).
- writes_per_machine_* / tasks_per_machine_*: the controller's API writes and the reconciles run
  during the rollout, per machine rolled (how each is counted: bench/figures.py).
- max_machines_* / min_available_*: the most Machine objects seen at once (terminating ones
  included; replicas + maxSurge = 22 is right) and the fewest Running machines not being deleted
  (replicas - maxUnavailable = 20 is right), from the benchmark's own watches.
- calibration: the host's CPU per empty Celery task (``bench/queue.py --calibration``): the host is
  shared, so its load shows there and in ``context.*.host``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import argparse  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from bench.common import NS, Bench, calibration, class_ref, context, parse_args, running_sandbox, save  # noqa: E402
from bench.watch import machine_summary, phase_of  # noqa: E402
from mcm_tasks import kinds  # noqa: E402
from mcm_tasks.api import API_VERSION  # noqa: E402

MAX_SURGE = 2


def deployment(name: str, class_name: str, replicas: int) -> dict[str, Any]:
    labels = {"pool": name}
    return {
        "apiVersion": API_VERSION,
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "minReadySeconds": 0,
            "selector": {"matchLabels": labels},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": MAX_SURGE, "maxUnavailable": 0},
            },
            "template": {"metadata": {"labels": labels}, "spec": {"class": class_ref(class_name)}},
        },
    }


def available(machines: list[dict[str, Any]]) -> int:
    return sum(1 for m in machines if phase_of(m) == "Running" and not m["metadata"].get("deletionTimestamp"))


def running(machines: list[dict[str, Any]], count: int, class_name: str) -> bool:
    return len(machines) == count and all(
        phase_of(m) == "Running" and m["spec"]["class"]["name"] == class_name for m in machines
    )


class Floor(threading.Thread):
    """The fewest available machines seen during the rollout, sampled from the tracker's store
    every 50 ms (the tracker itself keeps the most machines at once, exactly, per event)."""

    def __init__(self, bench: Bench) -> None:
        super().__init__(daemon=True)
        self.bench, self.least, self.stop = bench, 1 << 30, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            with self.bench.tracker.cond:
                self.least = min(self.least, available(self.bench.tracker.machines()))


def rollout(args: argparse.Namespace, lag: float) -> dict[str, Any]:
    """One sandbox (lagging or not): the deployment up, then the timed rollout; its figures."""
    with running_sandbox(args, cloud_redis=True, informer_watch_delay=lag) as bench:
        tracker, n = bench.tracker, args.replicas
        bench.secret_and_classes("class-a", "class-b")
        bench.create("control", kinds.MACHINE_DEPLOYMENT.resource, [deployment("roll", "class-a", n)])

        def wait(done: Any, what: str) -> None:
            tracker.wait(
                lambda: done(tracker.machines()), args.timeout, what, lambda: machine_summary(tracker)
            )

        wait(lambda ms: running(ms, n, "class-a"), f"{n} Running")
        bench.at_rest(quiet=max(4.0, 2 * lag))
        tracker.reset_peaks()
        floor = Floor(bench)
        floor.start()
        before = bench.snapshot()
        start = time.monotonic()
        new_class = {"spec": {"template": {"spec": {"class": class_ref("class-b")}}}}
        bench.patch(kinds.MACHINE_DEPLOYMENT.resource, "roll", new_class)
        wait(lambda ms: running(ms, n, "class-b"), "rolled")
        seconds = time.monotonic() - start
        after = bench.snapshot()
        floor.stop.set()
        floor.join(5)
        report = bench.report(before, after, n)
        return {
            "seconds": round(seconds, 1),
            "max_machines": tracker.max_total,
            "min_available": floor.least,
            "report": report,
            "host": {"load_avg_at_end": os.getloadavg()},
        }


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lag", type=float, default=3.0, help="the informer's watch delay, seconds")
    parser.add_argument("--replicas", type=int, default=20, help="machines rolled")
    parser.add_argument(
        "--lag-only", action="store_true", help="only the lagging rollout (figures to a temporary file)"
    )


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], options)
    host = calibration(args.no_calibration)
    ctx = context(args)
    n, lag_key = args.replicas, f"lag_{args.lag:g}s"
    runs: dict[str, dict[str, Any]] = {}
    if args.lag_only:
        args.out = args.out or Path(tempfile.gettempdir()) / "mcm-bench-results" / "lag-only.json"
    for name, lag in (("no_lag", 0.0), (lag_key, args.lag)):
        if args.lag_only and not lag:
            continue
        print(
            f"rollout of {n} (maxSurge {MAX_SURGE}, maxUnavailable 0), informer watch delay {lag:g}s",
            flush=True,
        )
        runs[name] = rollout(args, lag)
        print(f"  rolled in {runs[name]['seconds']:.1f}s", flush=True)
    base, lagged = runs.get("no_lag"), runs[lag_key]
    figures: dict[str, Any] = {f"rollout_{n}_seconds_{lag_key}": lagged["seconds"]}
    if base is not None:
        figures[f"rollout_{n}_seconds_no_lag"] = base["seconds"]
        figures[f"rollout_{n}_lag_ratio"] = round(lagged["seconds"] / base["seconds"], 2)
    for name, run in runs.items():
        report = run["report"]
        figures.update({
            f"writes_per_machine_{name}": report["writes_per_machine"],
            f"tasks_per_machine_{name}": report["tasks_per_machine"],
            f"cpu_ms_per_machine_{name}": report["cpu_ms_per_machine"],
            f"max_machines_{name}": run["max_machines"],
            f"min_available_{name}": run["min_available"],
        })  # fmt: skip
    figures["calibration_cpu_ms_per_empty_task"] = host.get("cpu_ms_per_empty_task")
    ctx.update(calibration=host, replicas=n, max_surge=MAX_SURGE, max_unavailable=0, lag_seconds=args.lag)
    ctx["target"] = {f"rollout_{n}_lag_ratio": 2.0, "max_machines": n + MAX_SURGE, "min_available": n}
    ctx["runs"] = runs
    save("lag", args, figures, ctx)


if __name__ == "__main__":
    main()
