"""What one LongRetry health recheck of a healthy Running machine costs the workers (lane idle-recheck).

Run: ``.venv/bin/python bench/recheck.py [--machines 120] [--long-retry 60] [--window 180]``.
Prints the figures and saves them to the temporary folder (``--out`` names a file).

A sandbox without beat (no safety runs), with rare kubelet heartbeats and the local cloud in a
Redis of its own (the kubelet simulator's reads of its VMs are no load on ours). First a
``--fixed`` window (s) with no machine: the workers' and Redis's fixed cost (polls, heartbeats,
sweeps) per second. Then ``--machines`` Running machines with LongRetry compressed to
``--long-retry`` seconds (``MCM_LONG_RETRY``; at 60 s or more it keeps the grid of
``policy.due_at``), so the fleet is rechecked at a steady rate; after a settle of two LongRetry
periods, a ``--window`` of s: worker CPU (psutil, every worker process tree, pool children
included; split into the main thread, its other threads and the pool children), Redis CPU and
Redis commands (INFO commandstats) minus the fixed window's rate times the window, divided by the
reconciles run in the window (queue statistics in Redis). 120 machines at ``--long-retry 60``
give 2 rechecks a second, near the idle window of bench/fleet_cost.py (1000 per 600 s).
``--profile DIR`` samples the workers with py-spy during the window.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import argparse  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import psutil  # noqa: E402

from bench.common import Bench, context, parse_args, running_sandbox, save  # noqa: E402
from bench.figures import Snapshot  # noqa: E402
from bench.fleet_cost import environment, fleet_up  # noqa: E402
from bench.scale import Driver  # noqa: E402


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--machines", type=int, default=120, help="Running machines rechecked")
    parser.add_argument("--long-retry", type=float, default=60.0, help="MCM_LONG_RETRY (s)")
    parser.add_argument("--window", type=float, default=180.0, help="measurement window (s)")
    parser.add_argument("--fixed", type=float, default=30.0, help="fixed-cost window with no machine (s)")


def _split(bench: Bench) -> dict[str, float]:
    """The workers' CPU by part: each worker's main thread (Celery's event loop, kombu), its other
    threads (the keeper, the renewal of held messages) and its pool children (the reconciles)."""
    parts = {"main_thread": 0.0, "other_threads": 0.0, "pool_children": 0.0}
    for name, pid in bench.sandbox.pids.items():
        if not name.startswith("worker-"):
            continue
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            for thread in proc.threads():
                part = "main_thread" if thread.id == pid else "other_threads"
                parts[part] += thread.user_time + thread.system_time
            for child in proc.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    t = child.cpu_times()
                    parts["pool_children"] += t.user + t.system
    return parts


def _window(bench: Bench, seconds: float) -> tuple[Snapshot, Snapshot, dict[str, float]]:
    before, split = bench.snapshot(), _split(bench)
    time.sleep(seconds)  # a measurement window, not a wait
    after = bench.snapshot()
    return before, after, {k: v - split[k] for k, v in _split(bench).items()}


def _costs(before: Snapshot, after: Snapshot, split: dict[str, float]) -> dict[str, float]:
    workers = sum(after.cpu.get(k, 0) - v for k, v in before.cpu.items() if k.startswith("worker-"))
    return {
        "seconds": after.at - before.at,
        "worker_cpu": workers,
        "redis_cpu": after.cpu.get("redis", 0) - before.cpu.get("redis", 0),
        "redis_commands": after.redis_commands - before.redis_commands,
        "reconciles": sum(q["reconciles"] - before.queues[k]["reconciles"] for k, q in after.queues.items()),
        **{f"worker_cpu_{k}": v for k, v in split.items()},
    }


def measure(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    env = {"MCM_LONG_RETRY": f"{args.long_retry:g}", "MCM_KUBELET_HEARTBEAT_INTERVAL": "3600"}
    with environment(env), running_sandbox(args, cloud_redis=True) as bench:
        d = Driver(bench, args.timeout)
        fixed = _costs(*_window(bench, args.fixed))
        up = fleet_up(bench, d, args.machines, args.timeout)
        time.sleep(2 * args.long_retry)  # settle: every machine's first recheck is past
        with bench.profiler.phase("recheck"):
            before, after, split = _window(bench, args.window)
        load = _costs(before, after, split)
        per_call = after.redis_calls - before.redis_calls
    rate = {k: v / fixed["seconds"] for k, v in fixed.items() if k not in ("seconds", "reconciles")}
    n = max(load["reconciles"], 1)
    figures = {
        "rechecks": load["reconciles"],
        "expected_rechecks": round(args.machines * load["seconds"] / args.long_retry),
        "worker_cpu_ms_per_recheck": round(
            (load["worker_cpu"] - rate["worker_cpu"] * load["seconds"]) * 1000 / n, 2
        ),
        **{
            f"{k}_ms_per_recheck": round((load[k] - rate[k] * load["seconds"]) * 1000 / n, 2)
            for k in load
            if k.startswith("worker_cpu_")
        },
        "redis_cpu_ms_per_recheck": round(
            (load["redis_cpu"] - rate["redis_cpu"] * load["seconds"]) * 1000 / n, 3
        ),
        "redis_commands_per_recheck": round(
            (load["redis_commands"] - rate["redis_commands"] * load["seconds"]) / n, 2
        ),
    }
    ctx = {
        "machines": args.machines,
        "long_retry": args.long_retry,
        "fleet_up_seconds": round(up, 1),
        "fixed_window": {k: round(v, 3) for k, v in fixed.items()},
        "recheck_window": {k: round(v, 3) for k, v in load.items()},
        "redis_calls_per_recheck": {k: round(v / n, 2) for k, v in per_call.most_common(40)},
        "profile": bench.profiler.summaries,
    }
    return figures, ctx


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], options)
    if args.out is None:
        args.out = Path(tempfile.gettempdir()) / "mcm-bench-results" / f"recheck-{os.getpid()}.json"
    ctx = context(args)
    figures, measured = measure(args)
    ctx.update(measured)
    save("recheck", args, figures, ctx)


if __name__ == "__main__":
    main()
