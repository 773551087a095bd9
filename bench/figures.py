"""The figures of a benchmark phase: what the counters read at its start and end (``Snapshot``) say
it cost, in total and per machine (``phase_report``), and which of the sandbox's processes are ours.

A snapshot (``bench.common.Bench.snapshot``) reads the global resourceVersion of each server (the
sandbox bumps one counter per committed write and never on a no-op, so its advance is the exact write
count), the queue statistics in Redis (reconciles run per queue), the kubelet simulator's own writes
(from its log), the benchmark's own writes, Redis's command count and the CPU time of every sandbox
process. ``controller`` writes = all writes − the benchmark's − the kubelet simulator's (exact, unlike
a count by user agent, which the sandbox does not keep); ``cpu_ms_per_machine`` counts our processes
only (``OUR_ROLES``), as issue 19 asks.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

#: the kubelet simulator's summary line (``log.info("tick: %s", "what=n, …")``), whatever the logger's
#: name and the log format (text or JSON): its writes are subtracted from the controller's
TICK = re.compile(r"\btick(?: [\w.-]+)?: (\w+=\d+(?:, \w+=\d+)*)")
#: the sandbox processes that are ours (what a user runs): Redis, the informer, the workers, beat.
#: The API servers and the kubelet simulator stand in for Kubernetes and are not counted; the local
#: cloud has no process of its own (its VMs live in a Redis, driven from the workers): in our Redis,
#: so its commands, and the kubelet simulator's reads of them, are inside Redis's figure, unless the
#: bench gives it a Redis of its own (``running_sandbox(cloud_redis=True)``: role ``cloud-redis``,
#: not counted, as a real cloud is no load on our Redis).
OUR_ROLES = ("redis", "informer", "worker-", "beat")


def ours(role: str) -> bool:
    return role.startswith(OUR_ROLES)


@dataclass
class Snapshot:
    at: float
    rv: dict[str, int]
    queues: dict[str, dict[str, float]]
    kubelet: Counter[str]
    own: Counter[str]
    events: Counter[str]
    parts: Counter[str]
    cpu: dict[str, float]
    redis_commands: int = 0
    redis_calls: Counter[str] = field(default_factory=Counter)


def cpu_seconds(pid: int) -> float:
    """CPU of a process and all its descendants, live or already reaped."""
    try:
        proc = psutil.Process(pid)
        t = proc.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                c = child.cpu_times()
                total += c.user + c.system
        return total
    except psutil.Error:
        return 0.0


def memory_pss(pids: dict[str, int]) -> dict[str, float]:
    """Proportional set size (MB) of each of our roles' process trees (pool children included): a
    page shared by n processes counts 1/n in each, so the sum is what the installation holds, not the
    RSS sum that counts a forked worker's shared pages once per child. Unlike CPU, a loaded host does
    not disturb it."""
    out: dict[str, float] = {}
    for role, pid in pids.items():
        if not ours(role) or not pid:
            continue
        total = 0
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            for p in [proc, *proc.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += p.memory_full_info().pss
        out[role] = round(total / 2**20, 1)
    return out


def kubelet_writes(log: Path) -> Counter[str]:
    """The kubelet simulator's writes so far, by what it wrote, summed from its ``tick`` lines."""
    kubelet: Counter[str] = Counter()
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        found = TICK.search(line)
        if found:
            for item in found.group(1).split(", "):
                what, _, n = item.partition("=")
                kubelet[what] += int(n)
    return kubelet


def _diff(a: Counter[str], b: Counter[str]) -> dict[str, int]:
    return {k: v for k, v in sorted((b - a).items()) if v}


def phase_report(before: Snapshot, after: Snapshot, machines: int) -> dict[str, Any]:
    """What one phase cost, in total and per machine it concerned."""
    writes = {s: after.rv[s] - before.rv[s] for s in after.rv}
    own = sum((after.own - before.own).values())
    kubelet = sum((after.kubelet - before.kubelet).values())
    events = _diff(before.events, after.events)
    total = sum(writes.values())
    controller = total - own - kubelet
    queues = {
        kind: {k: round(v - before.queues[kind][k], 3) for k, v in stats.items()}
        for kind, stats in after.queues.items()
    }
    queues = {k: v for k, v in queues.items() if any(v.values())}
    tasks = int(sum(q["reconciles"] for q in queues.values()))
    cpu = {k: round(after.cpu.get(k, 0) - v, 1) for k, v in before.cpu.items()}
    our_cpu = sum(after.cpu.get(k, 0) - v for k, v in before.cpu.items() if ours(k))
    return {
        "machines": machines,
        "writes": {
            **writes,
            "total": total,
            "by_benchmark": own,
            "by_kubelet_simulator": kubelet,
            "by_controller": controller,
            "seen_by_watches": sum(events.values()),
        },
        "writes_per_machine": round(controller / machines, 2),
        "tasks": tasks,
        "tasks_per_machine": round(tasks / machines, 2),
        "queues": queues,
        "kubelet_simulator": _diff(before.kubelet, after.kubelet),
        "events": events,
        "updates_by_part": _diff(before.parts, after.parts),
        "cpu_seconds": cpu,
        "cpu_seconds_ours": round(our_cpu, 2),
        "cpu_ms_per_machine": round(our_cpu * 1000 / machines, 1),
        # every client's: workers, informer, the local cloud's VMs, the kubelet simulator's reads of them
        "redis_commands_per_machine": round((after.redis_commands - before.redis_commands) / machines, 1),
        "redis_calls_per_machine": {
            k: round(v / machines, 1) for k, v in (after.redis_calls - before.redis_calls).most_common(12)
        },
        "wall_seconds": round(after.at - before.at, 2),
    }


#: the Event reasons of a reconcile that failed (``mcm_tasks.queue.processing``)
FAILURE_REASONS = ("ReconcileFailed", "ReconcileQuarantined")


def failures(report: dict[str, Any]) -> str:
    """A phase's failed reconciles, for the benchmarks to print after it: the retries per queue and
    the failure Events written; "" when there were none. An ordinary scale or rollout should fail
    nothing, and a failure otherwise hides in the results file (a class finalizer's Conflict did,
    one to seven in every scale-up, until 1 Dec)."""
    retried = {kind: int(q.get("retries", 0)) for kind, q in (report.get("queues") or {}).items()}
    parts = [f"{kind} {n}" for kind, n in sorted(retried.items()) if n]
    events = {
        reason: n
        for key, n in (report.get("updates_by_part") or {}).items()
        for reason in FAILURE_REASONS
        if key.endswith(f"ADDED {reason}") and n
    }
    if not parts and not events:
        return ""
    said = ", ".join(f"{n} {reason}" for reason, n in sorted(events.items()))
    return f"failed reconciles, retried: {', '.join(parts) or 'none'}" + (f"; Events: {said}" if said else "")


#: the scale cycle's per-machine figures; ``named_by_count`` puts the machine count in their keys
PER_MACHINE_KEYS = (
    "cpu_ms_per_machine_up", "cpu_ms_per_machine_down", "writes_per_machine_up", "writes_per_machine_down",
    "tasks_per_machine_up", "tasks_per_machine_down", "writes_per_machine", "tasks_per_machine",
    "scale_up_surplus_created",
)  # fmt: skip


def named_by_count(figures: dict[str, Any], machines: int) -> dict[str, Any]:
    """The scale cycle's figures with its machine count in their keys, as issue 33 names them
    (``scale_up_10000_seconds``, ``cpu_ms_per_machine_up_10000``; a ``_per_c`` figure keeps its
    suffix last), so one file can hold a 10 000-machine cycle beside its 1000-machine baseline.
    Keys that name no count of the cycle (calibration, the rollout) are left as they are."""
    out: dict[str, Any] = {}
    for key, value in figures.items():
        base, per_c = (key[: -len("_per_c")], "_per_c") if key.endswith("_per_c") else (key, "")
        if "_1000_" in base or base.endswith("_1000"):
            base = re.sub(r"_1000(?=_|$)", f"_{machines}", base, count=1)
        elif base in PER_MACHINE_KEYS:
            base = f"{base}_{machines}"
        out[base + per_c] = value
    return out


def against_baseline(figures: dict[str, Any], baseline: dict[str, Any], machines: int) -> dict[str, Any]:
    """The ratios of a cycle of ``machines`` (figures from ``named_by_count``) to a 1000-machine
    baseline (a scale.json's figures): issue 33 asks CPU per machine up to stay within 1.2 × (cost
    stays linear) and writes per machine unchanged. A ratio is None when either side lacks it."""
    pairs = {
        "cpu_up": "cpu_ms_per_machine_up", "cpu_down": "cpu_ms_per_machine_down",
        "writes_up": "writes_per_machine_up", "writes_down": "writes_per_machine_down",
        "writes": "writes_per_machine", "tasks": "tasks_per_machine",
    }  # fmt: skip
    ratios: dict[str, Any] = {}
    for name, key in pairs.items():
        big, small = figures.get(f"{key}_{machines}"), baseline.get(key)
        ratios[f"{name}_ratio_{machines}_to_1000"] = round(big / small, 2) if big and small else None
    return ratios


def calibration_figures(
    figures: dict[str, Any], before: dict[str, Any], after: dict[str, Any]
) -> dict[str, Any]:
    """The calibration taken after the run, the mean of both, and the CPU figures per mean c.

    A figure divided by a calibration taken minutes before it can be off by as much as the host
    drifts in that time; the mean of one taken before and one after bounds that drift from both
    sides, and their ratio says how far it went."""
    c0, c1 = before.get("cpu_ms_per_empty_task"), after.get("cpu_ms_per_empty_task")
    if not c1:
        return {}
    out: dict[str, Any] = {"calibration_cpu_ms_per_empty_task_after": c1}
    if not c0:
        return out
    mean = (c0 + c1) / 2
    out["calibration_cpu_ms_mean"] = round(mean, 3)
    out["calibration_drift"] = round(c1 / c0, 2)
    for key, value in figures.items():
        cpu = key.startswith(("cpu_ms_per_machine_up", "cpu_ms_per_machine_down")) and "_per_c" not in key
        if cpu and isinstance(value, int | float):
            out[f"{key}_per_c_mean"] = round(value / mean, 1)
    return out


def ratios_per_c(figures: dict[str, Any], saved: dict[str, Any], machines: int) -> dict[str, Any]:
    """``cpu_up_ratio_per_c_10000_to_1000`` (and down): the ratio of CPU per machine, each run's
    divided by its own mean calibration (before and after it), when both runs have one (``saved``:
    the 1000-machine run's figures); a pair whose host moved between them then still compares
    like with like."""
    small_c = saved.get("calibration_cpu_ms_mean")
    big_c = figures.get("calibration_cpu_ms_mean")
    out: dict[str, Any] = {}
    for name, key in (("cpu_up", "cpu_ms_per_machine_up"), ("cpu_down", "cpu_ms_per_machine_down")):
        big, small = figures.get(f"{key}_{machines}"), saved.get(key)
        ratio = (big / big_c) / (small / small_c) if big and small and big_c and small_c else None
        out[f"{name}_ratio_per_c_{machines}_to_1000"] = None if ratio is None else round(ratio, 2)
    return out
