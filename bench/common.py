"""Shared driver of the sandbox benchmarks (bench/machines.py, bench/scale.py).

A benchmark starts the whole sandbox (``mcm_sandbox.runner.up``), drives it through the API
servers and reads what happened from outside, so the figures include every process's real cost:

- a ``Tracker`` (bench/watch.py) watches both API servers from the start (every event), so waiting
  needs no polling LISTs, the largest machine count is seen at every instant, and each write is
  attributed to a resource and to the part of the object it changed;
- a ``Snapshot`` (``Bench.snapshot``) of every counter at the start and end of a phase, which
  ``bench.figures.phase_report`` turns into the phase's writes, tasks, Redis commands and CPU, per
  machine (how each is counted: bench/figures.py).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from kubernetes import config
from kubernetes.client import ApiClient

from bench.figures import Snapshot, cpu_seconds, kubelet_writes, memory_pss, phase_report
from bench.profiling import PhaseCpu, Profiler
from bench.watch import Tracker
from mcm_sandbox.procs import wait_until
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.kube import ops
from mcm_tasks.kube.resources import Resource

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
NS = "default"
SECRET = "bench-secret"

#: Deployment knobs, not shortcuts: the shared API budget of a real installation is sized to its
#: fleet (MCM's own default QPS would make any 1000-machine figure a rate-limit figure), and the
#: simulated kubelets heartbeat rarely so that 1000 nodes do not load the target server with
#: heartbeats nobody waits for. Controller periods and timeouts stay at their defaults.
BENCH_ENV = {
    "MCM_KUBE_API_QPS": "2000",
    "MCM_KUBE_API_BURST": "2000",
    "MCM_KUBELET_HEARTBEAT_INTERVAL": "600",
    "MCM_KUBELET_NODE_GRACE": "1800",
}


def parse_args(
    description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None
) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    if extra is not None:
        extra(parser)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every object count (0.1: quick)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds any one phase may take")
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default: see save())")
    parser.add_argument("--profile", type=Path, default=None, help="sample the workers with py-spy into DIR")
    parser.add_argument("--profile-idle", action="store_true", help="profile wall time, not only CPU")
    parser.add_argument(
        "--phase-cpu", action="store_true", help="the workers' own CPU by part, measured inside them"
    )
    parser.add_argument(
        "--beat-in-informer", action="store_true", help="beat as a thread of the informer (informer --beat)"
    )
    parser.add_argument(
        "--no-calibration", action="store_true", help="skip the host calibration (CPU per empty Celery task)"
    )
    parser.add_argument(
        "--wait-quiet", action="store_true", help="wait (≤ 15 min) for a 1-minute load ≤ 2.5 before starting"
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep each sandbox's folder and logs")
    return parser.parse_args()


def calibration(skip: bool = False) -> dict[str, Any]:
    """The host calibration saved beside every CPU figure: the CPU (workers + Redis) of an empty
    Celery task on 2 fresh prefork workers, from ``bench/queue.py --calibration`` (its own Redis and
    workers, run before the sandbox starts). Always the prefork pool, whatever the sandbox's
    ``MCM_WORKER_POOL``: c is a constant of the host (issue 28's 1.9 ms was taken so), not of the
    layout measured, or a cheaper pool would shrink its own yardstick. CPU per machine divided by it
    compares across hosts."""
    if skip:
        return {}
    with tempfile.TemporaryDirectory(prefix="mcm-calibration-") as tmp:
        out = Path(tmp) / "calibration.json"
        command = [sys.executable, str(ROOT / "bench" / "queue.py"), "--calibration", "--out", str(out)]
        env = {**os.environ, "MCM_WORKER_POOL": "prefork"}
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
        if done.returncode != 0 or not out.exists():
            print(f"calibration failed:\n{done.stderr[-2000:]}", file=sys.stderr)
            return {"error": done.stderr[-500:]}
        return dict(json.loads(out.read_text()))


def quiet_host(max_load: float = 2.5, poll: float = 30.0, limit: float = 900.0) -> dict[str, Any]:
    """Before a big run on a shared host: wait (bounded, ``limit`` seconds, polled every ``poll``)
    until the 1-minute load average is at most ``max_load``; run anyway after the limit. Returns the
    load averages seen and the seconds waited, for the figures' context."""
    start, before = time.monotonic(), os.getloadavg()
    loaded = False
    try:
        if before[0] > max_load:
            print(f"load {before[0]:.2f} > {max_load}: waiting up to {limit:.0f}s", flush=True)
        wait_until(lambda: os.getloadavg()[0] <= max_load, limit, interval=poll, what="a quiet host")
    except TimeoutError:
        loaded = True
    return {
        "load_avg_before_wait": before,
        "load_avg": os.getloadavg(),
        "waited_seconds": round(time.monotonic() - start, 1),
        "max_load": max_load,
        "still_loaded": loaded,
    }


def scaled(count: int, scale: float) -> int:
    return max(1, round(count * scale))


@dataclass
class Bench:
    """One running sandbox, its clients and the counters of what the benchmark itself wrote."""

    sandbox: Any
    apis: dict[str, ApiClient]
    tracker: Tracker
    profiler: Profiler
    phase_cpu: PhaseCpu = field(default_factory=lambda: PhaseCpu(False))
    own: Counter[str] = field(default_factory=Counter)

    @property
    def control(self) -> ApiClient:
        return self.apis["control"]

    @property
    def target(self) -> ApiClient:
        return self.apis["target"]

    # --- writes, counted ---
    def run_all(self, server: str, calls: Iterable[Callable[[], Any]], threads: int = 8) -> None:
        calls = list(calls)
        with ThreadPoolExecutor(threads) as pool:
            for future in [pool.submit(call) for call in calls]:
                future.result()
        with self.tracker.cond:
            self.own[server] += len(calls)

    def create(self, server: str, res: Resource, bodies: Iterable[dict[str, Any]]) -> None:
        api = self.apis[server]
        self.run_all(server, (lambda b=b: ops.create(api, res, b, NS) for b in bodies))  # type: ignore[misc]

    def delete(self, server: str, res: Resource, names: Iterable[str]) -> None:
        api = self.apis[server]
        self.run_all(server, (lambda n=n: ops.delete(api, res, n, NS) for n in names))  # type: ignore[misc]

    def patch(self, res: Resource, name: str, body: dict[str, Any], subresource: str | None = None) -> None:
        self.run_all(
            "control", [lambda: ops.patch(self.control, res, name, body, NS, subresource=subresource)]
        )

    def secret_and_classes(self, *names: str) -> None:
        user_data = base64.b64encode(b"#!/bin/sh\necho <<MACHINE_NAME>>\n").decode()
        self.create(
            "control",
            kinds.SECRET.resource,
            [{"metadata": {"name": SECRET}, "data": {"userData": user_data}}],
        )
        self.create("control", kinds.MACHINE_CLASS.resource, [machine_class(n) for n in names])

    # --- reads ---
    def at_rest(self, quiet: float = 12.0, timeout: float = 180.0) -> float:
        """Wait (bounded) until the watches have seen no change for ``quiet`` seconds (Leases
        aside: the leader elections renew theirs every few seconds) and no queue holds a message:
        the installation is at rest. ``quiet`` exceeds the processes' trim period
        (``mcm_tasks.memory.TRIM_PERIOD``): a figure at rest, not of a burst's tail. Returns the
        seconds waited; a timeout is reported (-1), not raised: the figure is taken anyway."""
        from mcm_tasks.kinds import QUEUES
        from mcm_tasks.queue.messages import broker_prefix
        from mcm_tasks.redisdb import get_redis
        from mcm_tasks.settings import get_settings

        client, s = get_redis(self.sandbox.redis_url), get_settings()
        queues = [broker_prefix(s) + s.queue_name(kind) for kind in QUEUES]
        start = since = time.monotonic()
        last = -1

        def resting() -> bool:
            nonlocal last, since
            with self.tracker.cond:
                seen = sum(n for key, n in self.tracker.events.items() if "/leases " not in key)
            if seen != last:
                last, since = seen, time.monotonic()
            waiting = sum(int(client.llen(name)) for name in queues)
            return waiting == 0 and time.monotonic() - since >= quiet

        try:
            wait_until(resting, timeout, interval=0.5, what="at rest")
        except TimeoutError as err:
            print(f"  {err}", file=sys.stderr, flush=True)
            return -1.0
        return round(time.monotonic() - start, 1)

    def memory(self) -> dict[str, Any]:
        """PSS of our processes (``bench.figures.memory_pss``), per role and in total."""
        roles = memory_pss(self.sandbox.pids)
        return {"total_mb": round(sum(roles.values()), 1), "roles": roles}

    def snapshot_rv(self) -> dict[str, int]:
        return {
            s: int(
                ops.list_(api, kinds.LEASE.resource, "kube-system", page_size=1)["metadata"][
                    "resourceVersion"
                ]
            )
            for s, api in self.apis.items()
        }

    def live_vms(self) -> int:
        from mcm_tasks.redisdb import get_redis
        from providers.local.cloud import LocalCloud

        return sum(1 for vm in LocalCloud(get_redis(self.sandbox.cloud_url)).all() if vm.live())

    def report(self, before: Snapshot, after: Snapshot, machines: int) -> dict[str, Any]:
        latency = self.tracker.latencies(before.at, after.at)
        return {**phase_report(before, after, machines), "latency": latency}

    def snapshot(self) -> Snapshot:
        from mcm_tasks.queue.stats import read_stats
        from mcm_tasks.redisdb import get_redis

        rv = self.snapshot_rv()
        queues = {
            q.kind: {
                "reconciles": q.work_duration.count,
                "adds": q.adds,
                "retries": q.retries,
                "work_seconds": q.work_duration.total,
            }
            for q in read_stats(get_redis(self.sandbox.redis_url))
        }
        client = get_redis(self.sandbox.redis_url)
        commands = int(client.info("stats")["total_commands_processed"])
        stats = client.info("commandstats").items()
        calls = Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats})
        kubelet = kubelet_writes(self.sandbox.dir / "logs" / "kubelet.log")
        cpu = {name: cpu_seconds(pid) for name, pid in self.sandbox.pids.items()}
        own = psutil.Process().cpu_times()  # not its children: they are the sandbox, counted above
        cpu["benchmark"] = own.user + own.system  # its watches compete for the same cores
        with self.tracker.cond:
            events, parts, own = Counter(self.tracker.events), Counter(self.tracker.parts), Counter(self.own)
        return Snapshot(time.time(), rv, queues, kubelet, own, events, parts, cpu, commands, calls)


# --- object bodies -------------------------------------------------------------------------------


def machine_class(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": NS},
        "provider": "local",
        "providerSpec": {"bootDelaySeconds": 0},
        "secretRef": {"name": SECRET, "namespace": NS},
    }


def class_ref(name: str) -> dict[str, Any]:
    return {"kind": "MachineClass", "name": name}


def pod_on(node: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "bench"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "app", "image": "registry.local/app:1"}],
        },
    }


# --- the run -------------------------------------------------------------------------------------


@contextlib.contextmanager
def running_sandbox(
    args: argparse.Namespace,
    with_beat: bool = False,
    cloud_redis: bool = False,
    informer_watch_delay: float = 0.0,
) -> Iterator[Bench]:
    """The sandbox with BENCH_ENV (caller's own MCM_* settings win), stopped and cleaned afterwards;
    ``cloud_redis``: the local cloud in a Redis of its own (see ``bench.figures.OUR_ROLES``);
    ``informer_watch_delay``: the informer's watches that many seconds late (``mcm_sandbox.watchdelay``)."""
    phase_cpu = PhaseCpu(getattr(args, "phase_cpu", False))
    saved = {k: os.environ.get(k) for k in [*BENCH_ENV, *phase_cpu.environ()]}
    for key, value in BENCH_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.update(phase_cpu.environ())
    from mcm_sandbox.runner import down, up
    from mcm_tasks.settings import configure

    directory = Path(tempfile.mkdtemp(prefix="mcm-bench-"))
    ok = False
    try:
        sandbox = up(
            directory, workers=args.workers, with_beat=with_beat, timeout=120, echo=lambda _: None,
            cloud_redis=cloud_redis, beat_in_informer=getattr(args, "beat_in_informer", False),
            informer_watch_delay=informer_watch_delay,
        )  # fmt: skip
        configure({"redis_url": sandbox.redis_url})
        apis = {
            "control": config.new_client_from_config(config_file=str(sandbox.kubeconfig)),
            "target": config.new_client_from_config(config_file=str(sandbox.target_kubeconfig)),
        }
        tracker = Tracker(apis).start()
        try:
            profiler = Profiler(args.profile, sandbox.pids, args.profile_idle)
            yield Bench(sandbox, apis, tracker, profiler, phase_cpu)
        finally:
            tracker.close()
            for api in apis.values():
                api.close()
        ok = True
    finally:
        down(directory, echo=lambda _: None)
        phase_cpu.close()
        for name, was in saved.items():
            if was is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = was
        if ok and not getattr(args, "keep_logs", False):
            shutil.rmtree(directory, ignore_errors=True)
        elif ok:
            print(f"sandbox logs kept in {directory / 'logs'}", file=sys.stderr)
        else:
            print(f"sandbox logs kept in {directory / 'logs'}", file=sys.stderr)


def source_version() -> str:
    """The commit measured, ``+changes`` when the controller's code differs from it; BENCH_COMMIT
    names it when the code runs from an export (``git archive``) of a commit."""

    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return os.environ.get("BENCH_COMMIT", "unknown")
    changed = git("status", "--porcelain", "--", "mcm_tasks", "informers", "providers")
    return commit + ("+changes" if changed else "")


def context(args: argparse.Namespace) -> dict[str, Any]:
    from mcm_tasks.settings import get_settings

    s = get_settings()
    knobs = ("kube_api_qps", "kube_api_burst", "worker_pool", "worker_concurrency", "short_retry",
             "medium_retry", "health_recheck_period", "machine_drain_timeout",
             "pod_eviction_retry_interval")  # fmt: skip
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": source_version(),
        "scale": args.scale,
        "worker_processes": args.workers,
        "beat_in_informer": getattr(args, "beat_in_informer", False),
        "settings": {k: getattr(s, k) for k in knobs},
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith("MCM_")},
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_at_start": os.getloadavg(),
        },
        "note": "2-core machine shared with other test runs: figures are pessimistic",
    }


def save(name: str, args: argparse.Namespace, figures: dict[str, Any], ctx: dict[str, Any]) -> None:
    """Print the figures; write them with their context to --out, else bench/results/NAME.json for a
    full-scale run, else a file in the temporary folder (a quick run never replaces real figures)."""
    ctx["host"]["load_avg_at_end"] = os.getloadavg()
    out = args.out or RESULTS / f"{name}.json"
    if args.out is None and args.scale != 1.0:  # bench/results/ holds full-scale figures only
        out = Path(tempfile.gettempdir()) / "mcm-bench-results" / f"{name}-scale{args.scale:g}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**figures, "context": ctx}, indent=2, default=str) + "\n")
    print(json.dumps(figures, indent=2))
    print(f"saved {out}")
