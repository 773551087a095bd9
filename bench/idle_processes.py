"""What each of our processes pays at rest, counted rather than timed (issue 19's fixed cost).

Run: ``.venv/bin/python bench/idle_processes.py [--machines 1] [--settle-minutes 0.5] [--window-minutes 1]``.
Prints the figures and saves bench/results/idle_processes.json (or ``--out``).

The idle installation of ``bench/fleet_cost.py`` (beat running, kubelet heartbeats every 5 min,
the local cloud in a Redis of its own) with a few machines; after the settle time, over the window,
per process of ours (each worker's main process and pool children apart, Redis, informer, beat):

- ``redis_per_s``: commands it sent to Redis per second (Redis ``MONITOR``, each client's address
  mapped to its process through the process's sockets); ``lua_per_s`` the commands its scripts ran
  inside Redis; ``commands``: the commands by name over the window;
- ``wakeups_per_s``: voluntary context switches of all its threads per second (each a block that
  ended: a timeout or a message), a count the other load on a shared host does not inflate;
- ``cpu_s``: CPU seconds over the window (this one a loaded host does inflate).
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import argparse  # noqa: E402
import contextlib  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import psutil  # noqa: E402
import redis  # noqa: E402

from bench.common import context, parse_args, running_sandbox, save  # noqa: E402
from bench.figures import ours  # noqa: E402
from bench.fleet_cost import IDLE_ENV, environment, fleet_up  # noqa: E402
from bench.scale import Driver  # noqa: E402


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--machines", type=int, default=1, help="machines of the idle fleet")
    parser.add_argument("--settle-minutes", type=float, default=0.5, help="lead-in before the window")
    parser.add_argument("--window-minutes", type=float, default=1.0, help="length of the counted window")


def processes(pids: dict[str, int]) -> dict[int, str]:
    """Every process of ours by pid: ``worker-0`` (main), ``worker-0/child`` (its pool), ``beat`` …"""
    out: dict[int, str] = {}
    for role, pid in pids.items():
        if not ours(role) or not pid:
            continue
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            out[pid] = role
            for child in proc.children(recursive=True):
                out[child.pid] = f"{role}/child"
    return out


def wakeups(pid: int) -> int:
    """Voluntary context switches of all the threads of a process."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        with contextlib.suppress(OSError):
            for line in status.read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def cpu(pid: int) -> float:
    with contextlib.suppress(psutil.Error):
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    return 0.0


@dataclass
class Monitor:
    """Redis ``MONITOR`` on a thread: commands counted by the process that sent them."""

    url: str
    redis_port: int
    owners: dict[int, str]
    sent: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    lua: Counter[str] = field(default_factory=Counter)
    _by_address: dict[str, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _refresh(self) -> None:
        for pid, name in self.owners.items():
            with contextlib.suppress(psutil.Error):
                for conn in psutil.Process(pid).net_connections(kind="tcp"):
                    if conn.raddr and conn.raddr.port == self.redis_port and conn.laddr:
                        self._by_address[f"{conn.laddr.ip}:{conn.laddr.port}"] = name

    def owner(self, address: str) -> str:
        if address not in self._by_address:
            self._refresh()
        return self._by_address.setdefault(address, "other")

    def run(self, seconds: float) -> None:
        self._refresh()
        client = redis.Redis.from_url(self.url)
        last = "other"
        deadline = time.monotonic() + seconds
        with client.monitor() as monitor:
            for entry in monitor.listen():
                if time.monotonic() >= deadline:
                    break
                command = str(entry.get("command", "")).split(" ", 1)[0].lower()
                if entry.get("client_type") == "lua":
                    self.lua[last] += 1
                    continue
                address = f"{entry.get('client_address', '')}:{entry.get('client_port', '')}"
                last = self.owner(address)
                self.sent[last][command] += 1


def measure(args: argparse.Namespace) -> dict[str, Any]:
    with environment(IDLE_ENV), running_sandbox(args, with_beat=True, cloud_redis=True) as bench:
        fleet_up(bench, Driver(bench, args.timeout), args.machines, args.timeout)
        time.sleep(args.settle_minutes * 60)  # a measurement window's lead-in, not a wait
        owners = processes(bench.sandbox.pids)
        port = int(bench.sandbox.redis_url.rsplit(":", 1)[1].split("/")[0])
        monitor = Monitor(bench.sandbox.redis_url, port, owners)
        before = {pid: (cpu(pid), wakeups(pid)) for pid in owners}
        start = time.monotonic()
        monitor.run(args.window_minutes * 60)
        seconds = time.monotonic() - start
        after = {pid: (cpu(pid), wakeups(pid)) for pid in owners}
    per: dict[str, dict[str, Any]] = {}
    for name in sorted(set(owners.values())):
        pids = [pid for pid, owner in owners.items() if owner == name]
        sent = monitor.sent.get(name, Counter())
        per[name] = {
            "processes": len(pids),
            "cpu_s": round(sum(after[p][0] - before[p][0] for p in pids), 2),
            "wakeups_per_s": round(sum(after[p][1] - before[p][1] for p in pids) / seconds, 1),
            "redis_per_s": round(sum(sent.values()) / seconds, 2),
            "lua_per_s": round(monitor.lua.get(name, 0) / seconds, 2),
            "commands": dict(sent.most_common()),
        }
    return {
        "window_seconds": round(seconds, 1),
        "machines": args.machines,
        "redis_commands_per_s": round(sum(sum(c.values()) for c in monitor.sent.values()) / seconds, 2),
        "cpu_s": round(sum(p["cpu_s"] for p in per.values()), 2),
        "wakeups_per_s": round(sum(p["wakeups_per_s"] for p in per.values()), 1),
        "processes": per,
        "unattributed_commands": dict(monitor.sent.get("other", Counter())),
    }


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], options)
    ctx = context(args)
    figures = measure(args)
    save("idle_processes", args, figures, ctx)


if __name__ == "__main__":
    main()
