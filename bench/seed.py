"""Seed mode benchmark (issue 33): one installation (informer with beat, 2 worker processes, Redis)
serving S shoot namespaces of a sandbox seed (``mcm_sandbox/seed.py``: one API-server process whose
virtual clusters are the shoots, one kubelet simulator for all), M machines per namespace.

Run: ``.venv/bin/python bench/seed.py [--shoots 50] [--machines 20] [--idle-minutes 10]``, or
``--quick`` (5 shoots × 4 machines, short windows: a check that it works, saved apart). Prints the
figures and saves bench/results/seed.json (``--out`` elsewhere; a run of another size than 50 × 20,
or ``--quick``, goes to the temporary folder unless ``--out`` names a file), with the host
calibration (``calibration_cpu_ms_per_empty_task``, as bench/scale.py measures it). Phases:

- scale_up_seconds: every namespace's MachineDeployment scaled 0 → M at once (one scale request
  each, 16 at a time), until all S × M Machines are Running (Nodes Ready), as the benchmark's watch
  of the control cluster sees them (``seed_scale_up_1000_seconds`` too when S × M is 1000). Beside
  it, as bench/scale.py counts them (``bench.figures.phase_report``): CPU per machine of our
  processes (Redis, informer with beat, workers; not the API server, the kubelet simulator or the
  local cloud's own Redis), API writes per machine (every committed write advances its cluster's
  resourceVersion by one: the control cluster's and every shoot's advance summed, minus the
  benchmark's and the kubelet simulator's writes), tasks per machine (reconciles run on every
  namespace's queues). Those three are counted until ``status_settled_seconds``: every
  namespace's MachineDeployment status says all M available and updated (the passes a burst's
  recounts defer are part of the scale-up's cost).
- idle: with all S × M machines Running, ``--settle-minutes`` of lead-in (past the health recheck
  each new machine leaves scheduled), then ``--idle-minutes`` (10) with no change: CPU of our
  processes over the window in percent of one core (``idle_cpu_percent_seed``), and their memory
  at the end as PSS (``idle_pss_mb_seed``; ``bench.figures.memory_pss``: a pool child's shared pages
  count once, not once per child). Kubelets heartbeat every 5 min, as a real kubelet's node status
  report (bench/fleet_cost.py's idle run does the same).
- fairness: the first namespace scales a MachineDeployment of its own 0 → ``--fairness-machines``
  (1000; when it gets there, back to 0, so it stays busy), and meanwhile, ``--fairness-samples``
  (20) times, one after the other and ``--fairness-interval`` (1 s) apart at least, so that they
  spread over the roll, a quiet namespace (the others in turn) scales its MachineDeployment by
  one. Each sample is the time from that scale request to the new Machine
  object's ADDED event on the benchmark's watch of the control cluster: the MachineDeployment's
  reconcile raised its MachineSet's replicas and the MachineSet's reconcile created the Machine, the
  first step of a one-machine change a user sees. ``fairness_p50_seconds`` / ``_p99_`` / ``_max_``;
  each sample's busy-namespace state is saved beside it (``context.fairness.samples``).
- single: a single-namespace installation of the normal sandbox (bench/common.py's, beat in the
  informer as here, the local cloud in a Redis of its own), M machines Running, at rest: PSS of all
  our processes (``single_install_pss_mb``) and, unless ``--single-idle-minutes 0``, its idle CPU
  over that window; ``single_installs_pss_mb`` and ``single_installs_idle_cpu_percent`` are S times
  those: what S per-shoot installations of ours would cost (computed from the measured one). The
  ``memory_pss_mb_*`` figures of bench/results/scale.json are copied beside them for reference.
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
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

from bench.common import BENCH_ENV, RESULTS, Bench, calibration, context, running_sandbox  # noqa: E402
from bench.figures import Snapshot, failures, ours  # noqa: E402
from bench.profiling import Profiler  # noqa: E402
from bench.watch import WATCHED, Tracker, phase_of  # noqa: E402
from mcm_sandbox.seed import Seed, machine_deployment  # noqa: E402
from mcm_tasks import kinds  # noqa: E402
from mcm_tasks.kube import ops  # noqa: E402

#: the MachineDeployment of M machines in every namespace, and the busy namespace's big one
WORKERS, ROLLING = "workers", "rolling"
#: a real kubelet reports node status every 5 min when nothing changes (as bench/fleet_cost.py's idle)
SEED_ENV = {**BENCH_ENV, "MCM_KUBELET_HEARTBEAT_INTERVAL": "300"}
QUICK = {"shoots": 5, "machines": 4, "fairness_machines": 40, "fairness_samples": 5, "fairness_interval": 0.2,
         "idle_minutes": 0.5, "settle_minutes": 0.25, "single_idle_minutes": 0.5}  # fmt: skip
FULL_SIZE = (50, 20)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shoots", type=int, default=50, help="shoot namespaces")
    parser.add_argument("--machines", type=int, default=20, help="machines per shoot namespace")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--fairness-machines", type=int, default=1000, help="machines the busy namespace rolls"
    )
    parser.add_argument("--fairness-samples", type=int, default=20, help="one-machine changes timed")
    parser.add_argument(
        "--fairness-interval",
        type=float,
        default=1.0,
        help="seconds from one sample's start to the next's, at least",
    )
    parser.add_argument("--idle-minutes", type=float, default=10.0, help="length of the idle window")
    parser.add_argument("--settle-minutes", type=float, default=4.0, help="lead-in before each idle window")
    parser.add_argument(
        "--single-idle-minutes",
        type=float,
        default=2.0,
        help="the single installation's idle window (0: none)",
    )
    parser.add_argument("--no-single", action="store_true", help="skip the single-namespace installation")
    parser.add_argument("--quick", action="store_true", help="5 × 4, short windows: a check, saved apart")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds any one phase may take")
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default: see the docstring)")
    parser.add_argument(
        "--no-calibration", action="store_true", help="skip the host calibration (CPU per empty Celery task)"
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the seed's folder and logs")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="sample the workers with py-spy into DIR (scale-up; idle with the informer)",
    )
    args = parser.parse_args(argv)
    if args.quick:  # the sizes of --quick, unless given
        given = {
            a.split("=")[0].lstrip("-").replace("-", "_")
            for a in (argv or sys.argv[1:])
            if a.startswith("--")
        }
        for key, value in QUICK.items():
            if key not in given:
                setattr(args, key, value)
    if args.shoots < 2:
        parser.error("--shoots: at least 2 (one busy, one quiet for the fairness samples)")
    # what bench.common's helpers read from a benchmark's arguments
    args.scale, args.profile_idle, args.beat_in_informer = 1.0, False, True
    return args


def shoot_names(count: int) -> list[str]:
    return [f"shoot-{i:03d}" for i in range(1, count + 1)]


def out_path(args: argparse.Namespace) -> Path:
    if args.out is not None:
        return Path(args.out)
    if not args.quick and (args.shoots, args.machines) == FULL_SIZE:
        return RESULTS / "seed.json"
    folder = Path(tempfile.gettempdir()) / "mcm-bench-results"
    return folder / f"seed-{'quick-' if args.quick else ''}{args.shoots}x{args.machines}.json"


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, was in saved.items():
            if was is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = was


# --- the seed, measured as bench/common.py measures the single sandbox ---------------------------


class SeedBench(Bench):
    """``Bench`` over a seed: the API clients are the control cluster's and every shoot's (a
    snapshot reads each one's resourceVersion), the queues are every namespace's, the watch is of
    the control cluster only (the shoots' Nodes are not needed to know a Machine Running)."""

    @property
    def shoots(self) -> list[str]:
        return [name for name in self.apis if name != "control"]

    def tenant_queues(self) -> list[tuple[str, Any]]:
        from mcm_tasks.settings import get_settings
        from mcm_tasks.tenancy import tenant_settings

        base = get_settings()
        return [(ns, tenant_settings(base, ns)) for ns in self.shoots]

    def queued(self) -> int:
        from mcm_tasks.kinds import QUEUES
        from mcm_tasks.queue.messages import broker_prefix
        from mcm_tasks.redisdb import get_redis

        client = get_redis(self.sandbox.redis_url)
        pipe = client.pipeline(transaction=False)
        for _, view in self.tenant_queues():
            for kind in QUEUES:
                pipe.llen(broker_prefix(view) + view.queue_name(kind))
        return sum(int(n) for n in pipe.execute())

    def at_rest(self, quiet: float = 12.0, timeout: float = 180.0) -> float:
        """``Bench.at_rest`` over every namespace's queues: no change seen for ``quiet`` seconds
        (Leases aside) and no message waiting; -1 after ``timeout`` (reported, not raised)."""
        from mcm_sandbox.procs import wait_until

        start = since = time.monotonic()
        last = -1

        def resting() -> bool:
            nonlocal last, since
            with self.tracker.cond:
                seen = sum(n for key, n in self.tracker.events.items() if "/leases " not in key)
            if seen != last:
                last, since = seen, time.monotonic()
            return self.queued() == 0 and time.monotonic() - since >= quiet

        try:
            wait_until(resting, timeout, interval=0.5, what="at rest")
        except TimeoutError as err:
            print(f"  {err}", file=sys.stderr, flush=True)
            return -1.0
        return round(time.monotonic() - start, 1)

    def snapshot(self) -> Snapshot:
        """``Bench.snapshot`` with each queue kind's counters summed over the namespaces."""
        from mcm_tasks.queue.stats import read_stats
        from mcm_tasks.redisdb import get_redis
        from mcm_tasks.tenancy import serving

        snap = super().snapshot()
        client = get_redis(self.sandbox.redis_url)
        totals: dict[str, Counter[str]] = {}
        for ns in self.shoots:
            with serving(ns):
                stats = read_stats(client)
            for q in stats:
                into = totals.setdefault(q.kind, Counter())
                into["reconciles"] += q.work_duration.count
                into["adds"] += q.adds
                into["retries"] += q.retries
                into["work_seconds"] += q.work_duration.total
        snap.queues = {kind: dict(values) for kind, values in totals.items()}
        return snap

    # --- the seed's objects ---
    def scale_all(self, replicas: dict[str, int], name: str = WORKERS) -> None:
        """Scale ``name`` in each namespace given, all at once (16 requests at a time)."""
        control = self.control

        def call(ns: str, n: int) -> Callable[[], Any]:
            body = {"spec": {"replicas": n}}
            return lambda: ops.patch(
                control, kinds.MACHINE_DEPLOYMENT.resource, name, body, ns, subresource="scale"
            )

        self.run_all("control", [call(ns, n) for ns, n in replicas.items()], threads=16)

    def machines_in(self, namespace: str, deployment: str | None = None) -> list[dict[str, Any]]:
        """The tracker's machines of a namespace (of one deployment's), under its lock."""
        return [
            m for (ns, _), m in self.tracker.objects.get("control/machines", {}).items()
            if ns == namespace
            and (deployment is None or (m["metadata"].get("labels") or {}).get("deployment") == deployment)
        ]  # fmt: skip

    def running(self, namespace: str, deployment: str) -> int:
        return sum(1 for m in self.machines_in(namespace, deployment) if phase_of(m) == "Running")


@contextlib.contextmanager
def running_seed(args: argparse.Namespace, shoots: list[str]) -> Iterator[SeedBench]:
    """A seed of ``shoots`` with SEED_ENV, its local cloud in a Redis of its own, stopped afterwards."""
    from kubernetes import config

    from mcm_tasks.settings import configure

    directory = Path(tempfile.mkdtemp(prefix="mcm-bench-seed-"))
    seed = Seed(directory, list(shoots), workers=args.workers, env=dict(SEED_ENV), cloud_redis=True)
    ok = False
    try:
        seed.start(timeout=max(120.0, 2.0 * len(shoots)))
        configure({"redis_url": seed.redis_url})
        apis = {"control": config.new_client_from_config(config_file=str(seed.kubeconfig))}
        apis.update(
            {s: config.new_client_from_config(config_file=str(seed.shoot_kubeconfig(s))) for s in shoots}
        )
        control_only = {"control": tuple(r for r in WATCHED["control"] if r is not kinds.SECRET.resource)}
        tracker = Tracker(apis, control_only).start()
        try:
            yield SeedBench(seed, apis, tracker, Profiler(args.profile, seed.pids, False))
        finally:
            tracker.close()
            for api in apis.values():
                api.close()
        ok = True
    finally:
        seed.stop()
        if ok and not args.keep_logs:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            print(f"seed logs kept in {directory / 'logs'}", file=sys.stderr)


# --- the phases ----------------------------------------------------------------------------------


def wait(bench: SeedBench, done: Callable[[], bool], timeout: float, what: str) -> float:
    def show() -> str:
        phases = Counter(phase_of(m) or "(none)" for m in bench.tracker.machines())
        return f"{sum(phases.values())} machines ({', '.join(f'{p} {n}' for p, n in sorted(phases.items()))})"

    return bench.tracker.wait(done, timeout, what, show)


def scale_up(bench: SeedBench, args: argparse.Namespace) -> tuple[float, dict[str, Any]]:
    total = args.shoots * args.machines
    print(f"scaling up {args.shoots} namespaces 0 → {args.machines} ({total} machines)", flush=True)
    before = bench.snapshot()
    start = time.monotonic()
    bench.scale_all(dict.fromkeys(bench.shoots, args.machines))

    def done() -> bool:
        return all(bench.running(ns, WORKERS) == args.machines for ns in bench.shoots)

    wait(bench, done, args.timeout, f"{total} Running")
    seconds = time.monotonic() - start
    print(f"  all Running in {seconds:.1f}s", flush=True)
    settled = status_settled(bench, args.machines, start, args.timeout)
    # the CPU, writes and tasks up to the statuses' last count: the recounts a burst defers
    # (--machine-set-recount-interval) are part of the scale-up's cost
    report = {**bench.report(before, bench.snapshot(), total), "status_settled_seconds": settled}
    print(f"  every MachineDeployment's status counts them available after {settled:.1f}s", flush=True)
    failed = failures(report)
    if failed:
        print(f"  {failed}", flush=True)
    return seconds, report


def status_settled(bench: SeedBench, machines: int, start: float, timeout: float) -> float:
    """Seconds from ``start`` until every namespace's MachineDeployment status says ``machines``
    available and updated (what Gardener's worker controller waits for), polled by one LIST."""
    from mcm_sandbox.procs import wait_until

    def settled() -> bool:
        found = ops.list_(bench.control, kinds.MACHINE_DEPLOYMENT.resource, all_namespaces=True)["items"]
        ours = [d for d in found if d["metadata"]["name"] == WORKERS]
        return len(ours) == len(bench.shoots) and all(
            (d.get("status") or {}).get("availableReplicas") == machines
            and (d.get("status") or {}).get("updatedReplicas") == machines
            for d in ours
        )

    wait_until(settled, timeout, interval=0.2, what="MachineDeployment statuses settled")
    return round(time.monotonic() - start, 1)


#: what the idle window reports beside its CPU and memory (``bench.figures.phase_report``'s keys)
IDLE_REPORT = (
    "cpu_seconds", "writes", "tasks", "queues", "redis_commands_per_machine", "redis_calls_per_machine",
)  # fmt: skip


def idle(bench: Bench, machines: int, minutes: float) -> dict[str, Any]:
    """Our CPU over a window in which nothing changes (a measurement window, not a wait), and our
    memory (PSS) at its end."""
    before = bench.snapshot()
    time.sleep(minutes * 60)
    after = bench.snapshot()
    seconds = after.at - before.at
    report = bench.report(before, after, machines)
    our_cpu = sum(after.cpu.get(k, 0) - v for k, v in before.cpu.items() if ours(k))
    return {
        "idle_cpu_percent": round(our_cpu / seconds * 100, 2),
        "seconds": round(seconds, 1),
        "memory": bench.memory(),
        **{k: report[k] for k in IDLE_REPORT},
    }


def fairness(bench: SeedBench, args: argparse.Namespace) -> dict[str, Any]:
    """One-machine changes in quiet namespaces while the first namespace rolls many machines."""
    busy, quiet = bench.shoots[0], bench.shoots[1:]
    big = args.fairness_machines
    goal = {"replicas": big}
    print(
        f"fairness: {busy} scales 0 → {big}; {args.fairness_samples} one-machine changes elsewhere",
        flush=True,
    )
    replicas = dict.fromkeys(quiet, args.machines)
    bench.scale_all({busy: big}, ROLLING)
    # the busy namespace's work has started: its first machines exist
    wait(
        bench, lambda: len(bench.machines_in(busy, ROLLING)) >= min(big, 10), args.timeout, "the roll started"
    )
    samples: list[dict[str, Any]] = []
    pace = threading.Event()  # never set: its wait is the samples' bounded pacing
    previous = time.monotonic()
    for i in range(args.fairness_samples):
        if samples:
            pace.wait(max(0.0, previous + args.fairness_interval - time.monotonic()))
        previous = time.monotonic()
        with bench.tracker.cond:
            running = bench.running(busy, ROLLING)
            present = len(bench.machines_in(busy, ROLLING))
        if goal["replicas"] == big and running == big:  # keep it busy: roll back down
            goal["replicas"] = 0
            bench.scale_all({busy: 0}, ROLLING)
        elif goal["replicas"] == 0 and present == 0:
            goal["replicas"] = big
            bench.scale_all({busy: big}, ROLLING)
        ns = quiet[i % len(quiet)]
        with bench.tracker.cond:
            known = {m["metadata"]["uid"] for m in bench.machines_in(ns)}
        replicas[ns] += 1
        changed = time.time()
        bench.scale_all({ns: replicas[ns]})

        def new_machine(ns: str = ns, known: set[str] = known) -> bool:
            return any(m["metadata"]["uid"] not in known for m in bench.machines_in(ns))

        wait(bench, new_machine, args.timeout, f"{ns}'s new machine")
        with bench.tracker.cond:
            uid = next(
                m["metadata"]["uid"] for m in bench.machines_in(ns) if m["metadata"]["uid"] not in known
            )
            added = bench.tracker.times[uid]["added"]
        samples.append({
            "namespace": ns, "seconds": round(added - changed, 3), "busy_goal": goal["replicas"],
            "busy_machines": present, "busy_running": running,
        })  # fmt: skip
        busy_now = f"busy: {present} machines, {running} Running"
        print(f"  {ns}: new machine after {added - changed:.2f}s ({busy_now})", flush=True)
    seconds = sorted(s["seconds"] for s in samples)
    busy_throughout = all(s["busy_running"] < big or s["busy_goal"] == 0 for s in samples)
    return {
        "busy_namespace": busy,
        "busy_machines": big,
        "observed": "the new Machine's ADDED event on the control cluster, from the scale request of +1",
        "quantiles": quantiles(seconds),
        "busy_throughout": busy_throughout,
        "samples": samples,
    }


def quantiles(values: list[float]) -> dict[str, float]:
    """Count, p50, p99 and max by nearest rank (the smallest value with at least q of the values at
    or below it): of 20 samples, p99 is the largest."""
    ordered = sorted(values)

    def rank(q: int) -> float:
        return round(ordered[max(1, -(-q * len(ordered) // 100)) - 1], 3)

    return {"count": len(ordered), "p50": rank(50), "p99": rank(99), "max": round(ordered[-1], 3)}


def single_install(args: argparse.Namespace) -> dict[str, Any]:
    """A single-namespace installation of the normal sandbox at M machines, at rest: PSS, idle CPU."""
    from bench.scale import Driver, deployment

    print(f"single-namespace installation, {args.machines} machines", flush=True)
    heartbeat = environment({"MCM_KUBELET_HEARTBEAT_INTERVAL": "300"})
    with heartbeat, running_sandbox(args, with_beat=True, cloud_redis=True) as bench:
        d = Driver(bench, args.timeout)
        bench.secret_and_classes("class-a")
        bench.create("control", kinds.MACHINE_DEPLOYMENT.resource, [deployment("fleet", "class-a")])
        d.scale("fleet", args.machines)
        d.wait(lambda: d.running(args.machines, "class-a"), f"{args.machines} Running")
        out: dict[str, Any] = {"rest_waited_seconds": bench.at_rest(), "memory": bench.memory()}
        if args.single_idle_minutes > 0:
            time.sleep(args.settle_minutes * 60)  # a measurement window's lead-in, not a wait
            out["idle"] = idle(bench, args.machines, args.single_idle_minutes)
    print(f"  {out['memory']['total_mb']} MB PSS {out['memory']['roles']}", flush=True)
    return out


def from_scale_json() -> dict[str, Any]:
    """bench/results/scale.json's memory figures of a single installation, for reference."""
    path = RESULTS / "scale.json"
    if not path.exists():
        return {}
    figures = json.loads(path.read_text())
    keys = ("memory_pss_mb_idle_install", "memory_pss_mb_1000", "machines")
    return {"file": "bench/results/scale.json", **{k: figures.get(k) for k in keys}}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    shoots = shoot_names(args.shoots)
    total = args.shoots * args.machines
    host = calibration(args.no_calibration)
    with running_seed(args, shoots) as bench:
        ctx = context(args)
        # the seed's processes run with SEED_ENV, not with this process's settings
        ctx["settings"].update(kube_api_qps=float(SEED_ENV["MCM_KUBE_API_QPS"]),
                               kube_api_burst=int(SEED_ENV["MCM_KUBE_API_BURST"]))  # fmt: skip
        ctx["environment"] = {**ctx["environment"], **SEED_ENV}
        ctx["layout"] = {
            "shoots": args.shoots, "machines_per_shoot": args.machines, "machines": total,
            "processes": sorted(bench.sandbox.pids), "beat": "in the informer (informer --beat)",
            "local_cloud": "a Redis of its own (role cloud-redis), not counted among our processes",
        }  # fmt: skip
        for ns in shoots:  # every namespace's deployments, at 0
            ops.create(bench.control, kinds.MACHINE_DEPLOYMENT.resource, machine_deployment(ns, WORKERS, 0))
            ops.create(bench.control, kinds.MACHINE_DEPLOYMENT.resource, machine_deployment(ns, ROLLING, 0))
        with bench.tracker.cond:
            bench.own["control"] += 2 * len(shoots)
        ctx["memory_empty"] = {"rest_waited_seconds": bench.at_rest(), **bench.memory()}
        print(
            f"seed of {args.shoots} shoots at rest, no machine: {ctx['memory_empty']['total_mb']} MB PSS",
            flush=True,
        )

        with bench.profiler.phase("scale_up", also=("informer",)):
            up_s, up = scale_up(bench, args)
        ctx["scale_up"] = {**up, "profile": bench.profiler.summaries.get("scale_up")}
        ctx["memory_full"] = {"rest_waited_seconds": bench.at_rest(), **bench.memory()}
        print(f"settle {args.settle_minutes} min, idle {args.idle_minutes} min", flush=True)
        time.sleep(args.settle_minutes * 60)  # a measurement window's lead-in, not a wait
        with bench.profiler.phase("idle", also=("informer",)):
            ctx["idle"] = idle(bench, total, args.idle_minutes)
        ctx["idle"]["profile"] = bench.profiler.summaries.get("idle")
        cpu, rest = ctx["idle"]["idle_cpu_percent"], ctx["idle"]["memory"]
        print(f"  idle: {cpu} % of a core, {rest['total_mb']} MB PSS {rest['roles']}", flush=True)
        ctx["fairness"] = fairness(bench, args)
        ctx["tracker_relists"] = bench.tracker.relists

    single: dict[str, Any] = {} if args.no_single else single_install(args)
    ctx["single_install"] = {**single, "scale_json": from_scale_json()}
    q = ctx["fairness"]["quantiles"]
    figures: dict[str, Any] = {
        "shoots": args.shoots,
        "machines_per_shoot": args.machines,
        "machines": total,
        "quick": args.quick,
        "scale_up_seconds": round(up_s, 1),
        "cpu_ms_per_machine_up": up["cpu_ms_per_machine"],
        "writes_per_machine_up": up["writes_per_machine"],
        "tasks_per_machine_up": up["tasks_per_machine"],
        "status_settled_seconds": up["status_settled_seconds"],
        "fairness_p50_seconds": q["p50"],
        "fairness_p99_seconds": q["p99"],
        "fairness_max_seconds": q["max"],
        "fairness_samples": q["count"],
        "fairness_busy_machines": args.fairness_machines,
        "idle_cpu_percent_seed": ctx["idle"]["idle_cpu_percent"],
        "idle_pss_mb_seed": ctx["idle"]["memory"]["total_mb"],
        "idle_minutes": args.idle_minutes,
        "calibration_cpu_ms_per_empty_task": host.get("cpu_ms_per_empty_task"),
    }
    if total == 1000:
        figures["seed_scale_up_1000_seconds"] = figures["scale_up_seconds"]
    if single:
        pss = single["memory"]["total_mb"]
        figures["single_install_pss_mb"] = pss
        figures["single_installs_pss_mb"] = round(args.shoots * pss, 1)
        if "idle" in single:
            figures["single_install_idle_cpu_percent"] = single["idle"]["idle_cpu_percent"]
            figures["single_installs_idle_cpu_percent"] = round(
                args.shoots * single["idle"]["idle_cpu_percent"], 2
            )
    ctx["calibration"] = host
    ctx["targets_issue_33"] = {  # on a quiet 2-core host, 50 × 20, 2 worker processes
        "seed_scale_up_1000_seconds": 20, "fairness_p99_seconds": 2,
        "idle_cpu_percent_seed": 3, "idle_pss_mb_seed": 1536,
    }  # fmt: skip
    save(args, figures, ctx)


def save(args: argparse.Namespace, figures: dict[str, Any], ctx: dict[str, Any]) -> None:
    """Print the figures and write them with their context (``out_path``)."""
    ctx["host"]["load_avg_at_end"] = os.getloadavg()
    out = out_path(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**figures, "context": ctx}, indent=2, default=str) + "\n")
    print(json.dumps(figures, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
