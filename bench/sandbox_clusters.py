"""What an idle virtual cluster of the sandbox costs (issue 33 item 5: dozens of shoots on two cores).

Run: ``.venv/bin/python bench/sandbox_clusters.py [--clusters 50] [--window 70] [--no-calibration]``.
Prints the figures and saves bench/results/sandbox_clusters.json (or ``--out``; ``--scale`` below 1
scales ``--clusters`` and writes to the temporary folder).

Two sandbox API-server processes, started one after the other on this host: one with no virtual
cluster (the cost of a target API server as its own process, today's per-shoot layout) and one with
``--clusters`` virtual clusters. For each, after start-up:

- ``pss_mb``: proportional set size of the process (a loaded host does not disturb it);
- ``idle_cpu_ms_per_s``: its CPU over ``--window`` seconds with no client;
- then the kubelet simulator (``mcm-tasks sandbox kubelet --clusters-dir``, one process for every
  cluster, its VMs in a redis-server of its own, none launched) watches every cluster as it does in
  the sandbox (Nodes, Pods, PVCs, PVs, VolumeAttachments: five watches a cluster, bookmarks on)
  and, over another window, ``watched_cpu_ms_per_s`` (the API server's CPU) and the kubelet's
  ``kubelet_pss_mb`` and ``kubelet_cpu_ms_per_s``.

Per cluster: ``pss_mb_per_idle_cluster`` = (PSS with N − PSS with none) / N, likewise the CPU (the
watched figures over N − 1: the single-cluster process's kubelet watches its root cluster);
``startup_seconds`` until the kubeconfig of the last cluster is written; ``add_cluster_ms``: one
more cluster added while running (admin endpoint, mean of 5). The host calibration is saved beside
the CPU figures (``bench.common.calibration``).
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import psutil  # noqa: E402

from bench.common import calibration, context, parse_args, save, scaled  # noqa: E402
from bench.figures import cpu_seconds  # noqa: E402
from mcm_sandbox.procs import ApiServer, ManagedProcess, RedisServer, wait_until  # noqa: E402


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clusters", type=int, default=50, help="virtual clusters of the measured process")
    parser.add_argument(
        "--window", type=float, default=70.0, help="seconds of each counted window (a bookmark round is 60 s)"
    )


def pss_mb(pid: int) -> float:
    return round(psutil.Process(pid).memory_full_info().pss / 2**20, 1)


def run_ns(pid: int) -> int:
    """CPU time of all of a process's threads in nanoseconds (the scheduler's count: the clock-tick
    counts psutil reads are 10 ms coarse, more than an idle process spends in a window)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total


def cpu_ms_per_s(pid: int, window: float) -> float:
    """The process's CPU over ``window`` seconds, in ms per second (schedstat where it exists)."""
    precise = Path(f"/proc/{pid}/task").exists()
    before = run_ns(pid) if precise else cpu_seconds(pid) * 1e9
    started = time.monotonic()
    time.sleep(window)
    after = run_ns(pid) if precise else cpu_seconds(pid) * 1e9
    return round((after - before) / 1e6 / (time.monotonic() - started), 3)


def measure_server(workdir: Path, clusters: int, window: float, redis_url: str) -> dict[str, Any]:
    args = ["--virtual-clusters", str(clusters)] if clusters else []
    server = ApiServer(workdir, name=f"apiserver-{clusters}", extra_args=args)
    started = time.monotonic()
    server.start(timeout=120)
    startup = time.monotonic() - started
    # the kubelet watches every virtual cluster, or the root one when there is none
    watched = max(clusters, 1)
    out: dict[str, Any] = {
        "virtual_clusters": clusters,
        "watched_clusters": watched,
        "startup_seconds": round(startup, 2),
    }
    try:
        time.sleep(2.0)  # the start-up's garbage settles
        out["pss_mb"] = pss_mb(server.process.pid)  # type: ignore[union-attr]
        out["idle_cpu_ms_per_s"] = cpu_ms_per_s(server.process.pid, window)  # type: ignore[union-attr]
        if clusters:
            took = []
            for i in range(5):
                t = time.monotonic()
                server.add_cluster(f"extra-{i}")
                took.append(time.monotonic() - t)
            out["add_cluster_ms"] = round(sum(took) / len(took) * 1000, 1)
            for i in range(5):
                server.remove_cluster(f"extra-{i}")
        kubelet = ManagedProcess(
            [
                sys.executable,
                "-m",
                "mcm_tasks.cli",
                "sandbox",
                "kubelet",
                "--clusters-dir",
                str(server.clusters_dir),
                *([] if clusters else ["--target-kubeconfig", str(server.kubeconfig)]),
                "--redis-url",
                redis_url,
            ],
            workdir / f"kubelet-{clusters}.log",
        )
        kubelet.start()
        try:

            def watching() -> bool:
                log = kubelet.log_path.read_text(errors="replace") if kubelet.log_path.exists() else ""
                return log.count("kubelets of ") >= watched

            wait_until(watching, 120, interval=0.5, what="the kubelet's clusters")
            time.sleep(5.0)  # every cluster's watches listed and parked
            out["watched_cpu_ms_per_s"] = cpu_ms_per_s(server.process.pid, window)  # type: ignore[union-attr]
            out["kubelet_pss_mb"] = pss_mb(kubelet.pid)
            out["kubelet_cpu_ms_per_s"] = cpu_ms_per_s(kubelet.pid, window)
            out["kubelet_threads"] = psutil.Process(kubelet.pid).num_threads()
            out["pss_mb_watched"] = pss_mb(server.process.pid)  # type: ignore[union-attr]
        finally:
            kubelet.stop()
    finally:
        server.stop()
    return out


def per_cluster(
    base: dict[str, Any], many: dict[str, Any], key: str, count: str = "virtual_clusters"
) -> float:
    """What one more cluster adds to ``key``: the difference over the difference in clusters."""
    return round((many[key] - base[key]) / (many[count] - base[count]), 3)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], options)
    clusters = scaled(args.clusters, args.scale)
    ctx = context(args)
    ctx["calibration"] = calibration(args.no_calibration)
    with tempfile.TemporaryDirectory(prefix="mcm-bench-clusters-") as tmp:
        redis_server = RedisServer(Path(tmp) / "redis").start()
        try:
            base = measure_server(Path(tmp) / "one", 0, args.window, redis_server.url)
            many = measure_server(Path(tmp) / "many", clusters, args.window, redis_server.url)
        finally:
            redis_server.stop()
    figures = {
        "virtual_clusters": clusters,
        "pss_mb_per_idle_cluster": per_cluster(base, many, "pss_mb"),
        "pss_mb_per_watched_cluster": per_cluster(base, many, "pss_mb_watched", "watched_clusters"),
        "idle_cpu_ms_per_s_per_cluster": per_cluster(base, many, "idle_cpu_ms_per_s"),
        "watched_cpu_ms_per_s_per_cluster": per_cluster(
            base, many, "watched_cpu_ms_per_s", "watched_clusters"
        ),
        "kubelet_pss_mb_per_cluster": per_cluster(base, many, "kubelet_pss_mb", "watched_clusters"),
        "kubelet_cpu_ms_per_s_per_cluster": per_cluster(
            base, many, "kubelet_cpu_ms_per_s", "watched_clusters"
        ),
        "separate_process_pss_mb": base["pss_mb"],
        "single_cluster_process": base,
        "many_clusters_process": many,
    }
    save("sandbox_clusters", args, figures, ctx)


if __name__ == "__main__":
    main()
