"""What a user pays when nothing happens, and at the default API budget (issue 19).

Run: ``.venv/bin/python bench/fleet_cost.py [--scale 0.2] [--idle-minutes 10] [--only idle rss qps]``.
Prints the figures and saves bench/results/fleet_cost.json (a run at another scale than 1 goes to
the temporary folder unless ``--out`` names a file). Each figure says the scale it was taken at.

- idle_cpu_percent_1000: a MachineDeployment of 1000 Running machines (beat running, kubelet
  heartbeats every 5 min as a real kubelet's node status report), ``--settle-minutes`` (4: past the
  60 s health recheck each Pending machine leaves scheduled), then ``--idle-minutes`` with no change:
  CPU of our processes (Redis, informer, workers, beat; ``bench.figures.OUR_ROLES``) over that
  window, in percent of one core. The local cloud lives in a Redis of its own (``cloud-redis``, not
  counted): the kubelet simulator reads every VM twice a second, a load a real cloud puts on no
  Redis of ours. The writes, reconciles and Redis commands of the window are saved beside it.
- informer_rss_mb_10k_pods: on the same fleet (1000 Nodes), 10 Pods per Node (``--pods`` sets the
  total, spread over the Nodes) created straight on the target API server; once the mirror in
  Redis holds all of them, the informer's resident memory (process tree). Its RSS before the pods
  and Redis's ``used_memory`` are saved beside it, and the same figures named by their counts
  (``informer_rss_mb_1000_nodes_10000_pods``). Issue 33's figure, 10 000 Nodes and 100 000 Pods:
  ``--scale 10 --only rss --wait-quiet --into bench/results/scale-10000.json`` (``--into`` merges the
  figures into that file and the context under ``context.informer_rss_<nodes>``).
- default_qps_200_seconds: a fresh sandbox at MCM's default ``--kube-api-qps 20 --kube-api-burst 30``;
  MachineDeployment 0 → 200 (``--qps-machines``, not scaled), from the scale request until all are
  Running; writes and tasks per machine beside it (the writes are what the budget is spent on).

The host calibration (CPU of an empty Celery task, ``bench/queue.py --calibration``) is saved too.
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
import time  # noqa: E402
from typing import Any  # noqa: E402

import psutil  # noqa: E402

from bench.common import (  # noqa: E402
    Bench,
    calibration,
    context,
    parse_args,
    pod_on,
    quiet_host,
    running_sandbox,
    save,
    scaled,
)
from bench.figures import ours  # noqa: E402
from bench.scale import Driver, deployment  # noqa: E402
from mcm_sandbox.procs import wait_until  # noqa: E402
from mcm_tasks import kinds  # noqa: E402
from mcm_tasks.cache import layout  # noqa: E402

PODS_PER_NODE = 10
#: a real kubelet reports node status every 5 min when nothing changes (nodeStatusReportFrequency)
IDLE_ENV = {"MCM_KUBELET_HEARTBEAT_INTERVAL": "300"}
DEFAULT_BUDGET = {"MCM_KUBE_API_QPS": "20", "MCM_KUBE_API_BURST": "30"}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--idle-minutes", type=float, default=10.0, help="length of the idle window")
    parser.add_argument("--settle-minutes", type=float, default=4.0, help="lead-in before the idle window")
    parser.add_argument("--qps-machines", type=int, default=200, help="machines of the default-budget run")
    parser.add_argument("--pods", type=int, default=None, help="pods to mirror (default: 10 per node)")
    parser.add_argument("--only", nargs="*", default=None, help="of: idle rss qps (default: all)")
    parser.add_argument("--into", type=Path, default=None, help="merge the figures into this results file")


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Any:
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


def rss_mb(pid: int) -> float:
    """Resident memory of a process and its descendants, MiB."""
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(pid)
        total = proc.memory_info().rss
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += child.memory_info().rss
        return round(total / 2**20, 1)
    return 0.0


def fleet_up(bench: Bench, d: Driver, machines: int, timeout: float) -> float:
    bench.secret_and_classes("class-a")
    bench.create("control", kinds.MACHINE_DEPLOYMENT.resource, [deployment("fleet", "class-a")])
    start = time.monotonic()
    d.scale("fleet", machines)
    d.wait(lambda: d.running(machines, "class-a"), f"{machines} Running")
    return time.monotonic() - start


def idle(bench: Bench, machines: int, minutes: float) -> dict[str, Any]:
    """Our CPU over a window in which nothing changes (a measurement window, not a wait)."""
    before = bench.snapshot()
    time.sleep(minutes * 60)
    after = bench.snapshot()
    seconds = after.at - before.at
    report = bench.report(before, after, machines)
    our_cpu = sum(after.cpu.get(k, 0) - v for k, v in before.cpu.items() if ours(k))
    return {
        "idle_cpu_percent": round(our_cpu / seconds * 100, 2),
        "seconds": round(seconds, 1),
        "cpu_seconds": report["cpu_seconds"],
        "cpu_ms_per_machine": report["cpu_ms_per_machine"],
        "redis_commands_per_machine": report["redis_commands_per_machine"],
        "redis_calls_per_machine": report["redis_calls_per_machine"],
        "writes": report["writes"],
        "events": report["events"],
        "tasks": report["tasks"],
        "queues": report["queues"],
    }


def informer_rss(bench: Bench, nodes: list[str], pods: int, timeout: float) -> dict[str, Any]:
    from mcm_tasks.redisdb import get_redis

    client = get_redis(bench.sandbox.redis_url)
    pid = bench.sandbox.pids["informer"]
    baseline = rss_mb(pid)
    load_start = os.getloadavg()
    bodies = [pod_on(nodes[i % len(nodes)], f"p-{i}") for i in range(pods)]
    start = time.monotonic()
    bench.create("target", kinds.POD.resource, bodies)
    wait_until(
        lambda: client.hlen(layout.objects_key(kinds.POD.mirror)) >= len(bodies),
        timeout,
        interval=0.5,
        what=f"{len(bodies)} pods mirrored",
    )
    mirrored_s = time.monotonic() - start
    # settle: the informer's last batches and the kubelet simulator's pod status writes
    time.sleep(10)
    return {
        "informer_rss_mb": rss_mb(pid),
        "informer_rss_mb_before_pods": baseline,
        "nodes": len(nodes),
        "pods": len(bodies),
        "create_and_mirror_seconds": round(mirrored_s, 1),
        "redis_used_memory_mb": round(int(client.info("memory")["used_memory"]) / 2**20, 1),
        # the sandbox's target API server holds every object (a stand-in, not ours): watched
        "apiserver_target_rss_mb": rss_mb(bench.sandbox.pids["apiserver-target"]),
        "benchmark_rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1),
        "load_avg": {"start": load_start, "end": os.getloadavg()},
    }


def default_qps(args: argparse.Namespace, machines: int) -> dict[str, Any]:
    with environment(DEFAULT_BUDGET), running_sandbox(args) as bench:
        d = Driver(bench, args.timeout)
        bench.secret_and_classes("class-a")
        bench.create("control", kinds.MACHINE_DEPLOYMENT.resource, [deployment("small", "class-a")])
        seconds, before, after = d.timed(
            lambda: d.scale("small", machines), lambda: d.wait(lambda: d.running(machines, "class-a"), "up")
        )
        report = bench.report(before, after, machines)
    return {
        "seconds": round(seconds, 1),
        "machines": machines,
        "kube_api_qps": 20,
        "kube_api_burst": 30,
        **{k: report[k] for k in ("writes_per_machine", "tasks_per_machine", "cpu_ms_per_machine", "writes")},
    }


def measure(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The figures of ``args.only`` (default: all three) and their context; ``bench/scale.py
    --fleet-cost`` calls this too, so scale.json carries them beside the scale figures."""
    chosen = set(args.only or ("idle", "rss", "qps"))
    machines = scaled(1000, args.scale)
    figures: dict[str, Any] = {}
    ctx: dict[str, Any] = {}
    if chosen & {"idle", "rss"}:
        with environment(IDLE_ENV), running_sandbox(args, with_beat=True, cloud_redis=True) as bench:
            d = Driver(bench, args.timeout)
            print(f"fleet of {machines}", flush=True)
            ctx["fleet_up_seconds"] = round(fleet_up(bench, d, machines, args.timeout), 1)
            if "idle" in chosen:
                print(f"settle {args.settle_minutes} min, idle {args.idle_minutes} min", flush=True)
                time.sleep(args.settle_minutes * 60)  # a measurement window's lead-in, not a wait
                ctx["idle"] = idle(bench, machines, args.idle_minutes)
                figures["idle_cpu_percent_1000"] = ctx["idle"]["idle_cpu_percent"]
                figures["idle_machines"] = machines
                figures["idle_minutes"] = args.idle_minutes
                figures["idle_settle_minutes"] = args.settle_minutes
            if "rss" in chosen:
                with bench.tracker.cond:
                    nodes = sorted(name for _, name in bench.tracker.objects.get("target/nodes", {}))
                pods = args.pods or len(nodes) * PODS_PER_NODE
                print(f"{pods} pods on {len(nodes)} nodes", flush=True)
                ctx["informer"] = informer_rss(bench, nodes, pods, args.timeout)
                figures["informer_rss_mb_10k_pods"] = ctx["informer"]["informer_rss_mb"]
                figures["informer_nodes"], figures["informer_pods"] = len(nodes), pods
                named = f"{len(nodes)}_nodes_{pods}_pods"
                figures[f"informer_rss_mb_{named}"] = ctx["informer"]["informer_rss_mb"]
                figures[f"informer_rss_mb_before_pods_{len(nodes)}_nodes"] = ctx["informer"][
                    "informer_rss_mb_before_pods"
                ]
    if "qps" in chosen:
        print(f"0 → {args.qps_machines} at --kube-api-qps 20 --kube-api-burst 30", flush=True)
        ctx["default_qps"] = default_qps(args, args.qps_machines)
        figures["default_qps_200_seconds"] = ctx["default_qps"]["seconds"]
        figures["default_qps_machines"] = args.qps_machines
    ctx["environments"] = {"idle_and_rss": IDLE_ENV, "default_qps": DEFAULT_BUDGET}
    ctx["local_cloud"] = {
        "idle_and_rss": "a Redis of its own (role cloud-redis), not counted among our processes",
        "default_qps": "in our Redis",
    }
    ctx["targets"] = {"idle_cpu_percent_1000": 2, "informer_rss_mb_10k_pods": 300}
    return figures, ctx


def merge_into(path: Path, figures: dict[str, Any], ctx: dict[str, Any], name: str) -> None:
    """Add the figures to a results file's top level and the context under ``context[name]``."""
    saved = json.loads(path.read_text()) if path.exists() else {"context": {}}
    # the file's own scale and calibration stay; the 1000-node name would mislabel another fleet
    skip = ("scale", "calibration_cpu_ms_per_empty_task", "informer_rss_mb_10k_pods")
    saved.update({k: v for k, v in figures.items() if k not in skip})
    saved.setdefault("context", {})[name] = {**ctx, "figures": figures}
    context_last = saved.pop("context")
    path.write_text(json.dumps({**saved, "context": context_last}, indent=2, default=str) + "\n")
    print(json.dumps(figures, indent=2))
    print(f"merged into {path} (context.{name})")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], options)
    quiet = quiet_host() if args.wait_quiet else None
    host = calibration(args.no_calibration)
    ctx = context(args)
    ctx["quiet_host"] = quiet
    figures, measured = measure(args)
    ctx.update(measured)
    calibrated = host.get("cpu_ms_per_empty_task")
    figures = {"scale": args.scale, **figures, "calibration_cpu_ms_per_empty_task": calibrated}
    ctx["calibration"] = host
    if args.into is not None:
        ctx["host"]["load_avg_at_end"] = os.getloadavg()
        merge_into(args.into, figures, ctx, f"informer_rss_{figures.get('informer_nodes', 'none')}")
        return
    save("fleet_cost", args, figures, ctx)


if __name__ == "__main__":
    main()
