"""MachineDeployment benchmark: 0 → 1000 → 0 replicas, and a RollingUpdate of 300 with maxSurge 10%.

Run: ``.venv/bin/python bench/scale.py [--scale 0.1]``. Prints the figures and saves
bench/results/scale.json. The whole sandbox runs (2 worker processes, informer, kubelet simulator,
two API servers, Redis); MachineClasses with zero boot delay. Targets: 60 s, 60 s and 120 s.

- scale_up_1000_seconds: from the scale request until 1000 Machines are Running (Nodes Ready).
- scale_down_1000_seconds: from the scale request to 0 until every Machine, Node and VM is gone.
- rolling_300_seconds: a deployment of 300 Running machines (maxSurge 10%, maxUnavailable 0) gets a
  new MachineClass; from that change until 300 Machines of the new class are Running and none of
  the old class is left.
- writes_per_machine_up / _down (and ``writes_per_machine`` over the whole 0 → 1000 → 0 cycle): the
  controller's API writes (control + target, Events included; every committed write advances the
  server's resourceVersion by one, minus the benchmark's own writes and the kubelet simulator's,
  which it logs), per machine.
- tasks_per_machine_up / _down (and over the cycle): reconciles run on all queues, per machine.
- cpu_ms_per_machine_up / _down: CPU (user + system, psutil over each process tree, exited pool
  children included) of our processes: Redis, informer, workers (``bench.figures.OUR_ROLES``); not the
  API servers, the kubelet simulator, the local cloud or the benchmark. The local cloud's VMs live
  in a Redis of their own (role ``cloud-redis``), as a real cloud puts no load on our Redis; until
  the 25 Nov evening run they lived in ours, and Redis's figure held the cloud's commands and the
  kubelet simulator's reads of them. ``context.phases.*.cpu_seconds`` has every role.
- calibration: the host's CPU per empty Celery task (``bench/queue.py --calibration``, run before the
  sandbox starts): CPU figures from different hosts compare after dividing by it. It runs again
  once the sandbox has stopped (``calibration_cpu_ms_per_empty_task_after``): a host whose speed
  moved during the run (by a quarter within the hour on these hosts) shows it, and
  ``calibration_cpu_ms_mean`` (the two's mean) is what the ``*_per_c_mean`` figures and the
  ``--baseline`` ratios per c divide by.
- scale_up_surplus_created: Machines created during the scale-up beyond its replicas (0 when the
  MachineSet's expectations hold: a surplus is created, then deleted again within the phase, as a
  stale list of machines trusted once did on a loaded host).
- max_overshoot: during the rollout a watch sees every Machine; the largest count of Machine
  objects (terminating ones included) minus (replicas + maxSurge). ``context.rolling`` also gives
  the figure without terminating machines.

``--fleet-cost`` then also runs ``bench/fleet_cost.py``'s measures (each on a fresh sandbox:
``idle_cpu_percent_1000``, ``informer_rss_mb_10k_pods``, ``default_qps_200_seconds``; ``--only`` and
its other options pick and size them) and saves their figures in the same file, so scale.json holds
every figure issue 19 names.

``--ten-thousand`` runs issue 33's cycle, 0 → 10 000 → 0 (``--scale 10``, no rollout unless
``--with-rolling``, which rolls 3000), names its figures by the machine count
(``scale_up_10000_seconds``, ``cpu_ms_per_machine_up_10000``, ``writes_per_machine_up_10000``…) and
saves bench/results/scale-10000.json, never scale.json; phases may take an hour (``--timeout``).
``--baseline FILE`` copies a 1000-machine run's figures (made just before, on the same host:
``--scale 1 --no-rolling --wait-quiet --out FILE``) in as ``baseline_1000``, with the ratios
(``cpu_up_ratio_10000_to_1000``, ``writes_up_ratio_10000_to_1000``…). ``--wait-quiet`` (implied by
``--ten-thousand``) waits, bounded, for the host's 1-minute load to fall to 2.5 before starting;
``context.load_avg_phases`` has the load averages at the start and end of each phase.

``--profile DIR`` samples the worker processes with py-spy during each phase and adds a summary
(share of task time per reconciler and per function) under ``context.profile``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

from bench.common import (  # noqa: E402
    NS,
    RESULTS,
    Bench,
    calibration,
    class_ref,
    context,
    parse_args,
    quiet_host,
    running_sandbox,
    save,
    scaled,
)
from bench.figures import (  # noqa: E402
    Snapshot,
    against_baseline,
    calibration_figures,
    failures,
    named_by_count,
    ratios_per_c,
)
from bench.watch import machine_summary, phase_of  # noqa: E402
from mcm_sandbox.procs import wait_until  # noqa: E402
from mcm_tasks import kinds  # noqa: E402
from mcm_tasks.api import API_VERSION  # noqa: E402

SURGE_PERCENT = 10
TEN_THOUSAND = 10.0  # the scale of issue 33's cycle: 1000 → 10 000 machines, 300 → 3000 rolled
DEFAULT_TIMEOUT = 900.0  # bench.common.parse_args's


def deployment(name: str, class_name: str) -> dict[str, Any]:
    labels = {"pool": name}
    return {
        "apiVersion": API_VERSION,
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 0,
            "minReadySeconds": 0,
            "selector": {"matchLabels": labels},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": f"{SURGE_PERCENT}%", "maxUnavailable": 0},
            },
            "template": {"metadata": {"labels": labels}, "spec": {"class": class_ref(class_name)}},
        },
    }


class Driver:
    def __init__(self, bench: Bench, timeout: float) -> None:
        self.bench, self.tracker, self.timeout = bench, bench.tracker, timeout

    def scale(self, name: str, replicas: int) -> None:
        self.bench.patch(
            kinds.MACHINE_DEPLOYMENT.resource, name, {"spec": {"replicas": replicas}}, subresource="scale"
        )

    def running(self, count: int, class_name: str) -> bool:
        machines = self.tracker.machines()
        return len(machines) == count and all(
            phase_of(m) == "Running" and m["spec"]["class"]["name"] == class_name for m in machines
        )

    def wait(self, done: Any, what: str) -> None:
        self.tracker.wait(done, self.timeout, what, lambda: machine_summary(self.tracker))

    def all_gone(self) -> None:
        self.wait(lambda: not self.tracker.machines() and self.tracker.count("target/nodes") == 0, "all gone")
        wait_until(lambda: self.bench.live_vms() == 0, 60, interval=0.2, what="no VM left")

    def timed(self, action: Any, until: Any) -> tuple[float, Snapshot, Snapshot]:
        before = self.bench.snapshot()
        start = time.monotonic()
        action()
        until()
        seconds = time.monotonic() - start
        return seconds, before, self.bench.snapshot()


def options(parser: argparse.ArgumentParser) -> None:
    from bench import fleet_cost

    parser.add_argument("--fleet-cost", action="store_true", help="also run bench/fleet_cost.py's measures")
    parser.add_argument(
        "--rolling-only", action="store_true", help="skip the 0 → 1000 → 0 cycle: only the rollout (quicker)"
    )
    parser.add_argument(
        "--ten-thousand",
        action="store_true",
        help="issue 33: 0 → 10 000 → 0, figures named by count, saved to bench/results/scale-10000.json",
    )
    parser.add_argument("--with-rolling", action="store_true", help="with --ten-thousand: also roll 3000")
    parser.add_argument("--no-rolling", action="store_true", help="skip the rollout (the cycle only)")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a 1000-machine run's JSON, copied in as baseline_1000 with the ratios to it",
    )
    fleet_cost.options(parser)


def ten_thousand(args: argparse.Namespace) -> None:
    """``--ten-thousand``'s defaults: scale 10, its own file, an hour per phase, no rollout."""
    args.scale, args.wait_quiet = TEN_THOUSAND, True
    args.no_rolling = args.no_rolling or not args.with_rolling
    if args.out is None:
        args.out = RESULTS / "scale-10000.json"
    if args.timeout == DEFAULT_TIMEOUT:
        args.timeout = 3600.0


def baseline_figures(path: Path, machines: int, figures: dict[str, Any]) -> dict[str, Any]:
    """``baseline_1000`` (the 1000-machine run's figures and where they were taken) and the ratios."""
    saved = json.loads(path.read_text())
    ctx = saved.get("context", {})
    figs = {k: v for k, v in saved.items() if k != "context"}
    where = {k: ctx.get(k) for k in ("date", "commit", "scale", "load_avg_phases", "calibration", "host")}
    return {"baseline_1000": {**figs, "context": where}, **against_baseline(figures, figs, machines)}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], options)
    if args.ten_thousand:
        ten_thousand(args)
    if args.rolling_only and args.out is None:  # no scale-up/down figures: never replaces scale.json
        args.out = Path(tempfile.gettempdir()) / "mcm-bench-results" / f"scale-rolling-{args.scale:g}.json"
    big, rolled = scaled(1000, args.scale), scaled(300, args.scale)
    surge = math.ceil(rolled * SURGE_PERCENT / 100)
    quiet = quiet_host() if args.wait_quiet else None
    host = calibration(args.no_calibration)
    with running_sandbox(args, with_beat=True, cloud_redis=True) as bench:
        ctx = context(args)
        ctx["quiet_host"] = quiet
        loads: dict[str, dict[str, Any]] = {}
        ctx["load_avg_phases"] = loads
        idle = {"rest_waited_seconds": bench.at_rest(), **bench.memory()}
        ctx["memory_idle_install"] = idle
        print(f"idle installation: {idle['total_mb']} MB PSS {idle['roles']}", flush=True)
        ctx["local_cloud"] = "a Redis of its own (role cloud-redis), not counted among our processes"
        d = Driver(bench, args.timeout)

        @contextlib.contextmanager
        def phase(name: str, machines: int) -> Iterator[None]:
            loads[name] = {"start": os.getloadavg()}
            with bench.profiler.phase(name, also=("informer",)), bench.phase_cpu.phase(name, machines):
                yield
            loads[name]["end"] = os.getloadavg()

        bench.secret_and_classes("class-a", "class-b")
        bench.create("control", kinds.MACHINE_DEPLOYMENT.resource, [deployment("big", "class-a")])

        if args.rolling_only:
            up_s = down_s = 0.0
            a = b = c = bench.snapshot()
        else:
            print(f"scaling up 0 → {big}", flush=True)
            with phase("scale_up", big):
                up_s, a, b = d.timed(
                    lambda: d.scale("big", big), lambda: d.wait(lambda: d.running(big, "class-a"), "up")
                )
            print(f"  all Running in {up_s:.1f}s", flush=True)
            full = {"rest_waited_seconds": bench.at_rest(), **bench.memory()}
            ctx[f"memory_{big}"] = full
            print(f"  at rest: {full['total_mb']} MB PSS {full['roles']}", flush=True)
            print(f"scaling down {big} → 0", flush=True)
            with phase("scale_down", big):
                down_s, _, c = d.timed(lambda: d.scale("big", 0), d.all_gone)
            print(f"  all gone in {down_s:.1f}s", flush=True)

        rolling = None
        if not args.no_rolling:
            rolling = roll(bench, d, phase, rolled)
            print(f"  rolled in {rolling[0]:.1f}s", flush=True)
        cycle, up, down = bench.report(a, c, big), bench.report(a, b, big), bench.report(b, c, big)
        ctx["phases"] = {"scale_up": up, "scale_down": down, "cycle": cycle}
        if rolling is not None:
            ctx["phases"]["rolling"] = bench.report(rolling[1], rolling[2], rolled)
        for name, report in ctx["phases"].items():
            failed = failures(report) if name != "cycle" else ""
            if failed:
                print(f"  {name}: {failed}", flush=True)
        ctx.update(machines=big, tracker_relists=bench.tracker.relists, profile=bench.profiler.summaries)
        if bench.phase_cpu.figures:
            ctx["phase_cpu"] = outside_tasks(bench.phase_cpu.figures, ctx["phases"], big)

    figures = {
        "scale_up_1000_seconds": round(up_s, 1),
        "scale_down_1000_seconds": round(down_s, 1),
        "cpu_ms_per_machine_up": up["cpu_ms_per_machine"],
        "cpu_ms_per_machine_down": down["cpu_ms_per_machine"],
        "writes_per_machine_up": up["writes_per_machine"],
        "writes_per_machine_down": down["writes_per_machine"],
        "tasks_per_machine_up": up["tasks_per_machine"],
        "tasks_per_machine_down": down["tasks_per_machine"],
        "writes_per_machine": cycle["writes_per_machine"],
        "tasks_per_machine": cycle["tasks_per_machine"],
        "scale_up_surplus_created": up["events"].get("control/machines ADDED", 0) - big,
        "machines": big,
        "memory_pss_mb_1000": ctx.get(f"memory_{big}", {}).get("total_mb"),
        "memory_pss_mb_idle_install": idle["total_mb"],
        "calibration_cpu_ms_per_empty_task": host.get("cpu_ms_per_empty_task"),
    }
    if rolling is not None:
        roll_s, peak, peak_active = rolling[0], rolling[3], rolling[4]
        figures["rolling_300_seconds"] = round(roll_s, 1)
        figures["max_overshoot"] = peak - (rolled + surge)
        ctx["rolling"] = {
            "replicas": rolled,
            "max_surge": surge,
            "max_unavailable": 0,
            "max_machines_seen": peak,
            "max_machines_seen_not_terminating": peak_active,
            "max_overshoot_not_terminating": peak_active - (rolled + surge),
        }
    c = host.get("cpu_ms_per_empty_task")
    if c:  # the targets are in units of c: ≤ 6, ≤ 12 and ≤ 8 (seconds read as ms)
        for key in ("cpu_ms_per_machine_up", "cpu_ms_per_machine_down", "scale_up_1000_seconds"):
            figures[f"{key}_per_c"] = round(figures[key] / c, 1)
    if args.ten_thousand:
        figures = named_by_count(figures, big)
        if "rolling_300_seconds" in figures:  # the rollout's size is in its key
            figures[f"rolling_{rolled}_seconds"] = figures.pop("rolling_300_seconds")
        if args.baseline is not None:
            figures.update(baseline_figures(args.baseline, big, figures))
        ctx["targets_issue_33"] = {
            "scale_up_10000_seconds": None, "scale_down_10000_seconds": None,
            "cpu_up_ratio_10000_to_1000": 1.2, "writes_per_machine": "unchanged",
            "informer_rss_mb_10000_nodes_100000_pods": 1024,
        }  # fmt: skip
    ctx["calibration"] = host
    after = calibration(args.no_calibration)
    ctx["calibration_after"] = after
    figures.update(calibration_figures(figures, host, after))
    if args.ten_thousand and args.baseline is not None:
        figures.update(ratios_per_c(figures, json.loads(args.baseline.read_text()), big))
    ctx["targets_seconds"] = {"scale_up_1000": 60, "scale_down_1000": 60, "rolling_300": 120}
    ctx["targets_issue_19"] = {  # on a quiet 2-core host
        "scale_up_1000_seconds": 15, "scale_down_1000_seconds": 15, "rolling_300_seconds": 15,
        "cpu_ms_per_machine_up": 20, "cpu_ms_per_machine_down": 20,
        "writes_per_machine_up": 7.0, "writes_per_machine_down": 12.0,
    }  # fmt: skip
    if args.fleet_cost:
        from bench import fleet_cost

        fleet_figures, ctx["fleet_cost"] = fleet_cost.measure(args)
        figures.update(fleet_figures)
    save("scale", args, figures, ctx)


def outside_tasks(parts: dict[str, Any], phases: dict[str, Any], machines: int) -> dict[str, Any]:
    """``--phase-cpu``'s parts of each phase, with the workers' CPU outside every task (Celery's
    consumer loop, acks, task events, the pool hand-off, the worker's own threads): the worker
    processes' CPU less the tasks' own."""
    out: dict[str, Any] = {}
    for name, found in parts.items():
        report = phases.get(name, {})
        workers = sum(v for k, v in report.get("cpu_seconds", {}).items() if k.startswith("worker"))
        task = found.get("task", {}).get("cpu_s")
        if task is not None and workers:
            per = report.get("machines") or machines
            found = {**found, "workers_outside_tasks": {
                "cpu_s": round(workers - task, 3), "ms_per_machine": round((workers - task) / per * 1e3, 3),
            }}  # fmt: skip
        out[name] = found
    return out


def roll(bench: Bench, d: Driver, phase: Any, rolled: int) -> tuple[float, Snapshot, Snapshot, int, int]:
    """The rollout: ``rolled`` Running machines get a new class; its seconds, snapshots and peaks."""
    surge = math.ceil(rolled * SURGE_PERCENT / 100)
    print(f"rollout of {rolled} (maxSurge {SURGE_PERCENT}% = {surge}, maxUnavailable 0)", flush=True)
    bench.create("control", kinds.MACHINE_DEPLOYMENT.resource, [deployment("roll", "class-a")])
    d.scale("roll", rolled)
    d.wait(lambda: d.running(rolled, "class-a"), f"{rolled} Running")
    bench.tracker.reset_peaks()
    new_class = {"spec": {"template": {"spec": {"class": class_ref("class-b")}}}}
    with phase("rolling", rolled):
        seconds, r0, r1 = d.timed(
            lambda: bench.patch(kinds.MACHINE_DEPLOYMENT.resource, "roll", new_class),
            lambda: d.wait(lambda: d.running(rolled, "class-b"), "rolled"),
        )
    return seconds, r0, r1, bench.tracker.max_total, bench.tracker.max_active


if __name__ == "__main__":
    main()
