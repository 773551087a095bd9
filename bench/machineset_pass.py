"""What one MachineSet pass costs, alone, at 100, 1000 and 5000 machines (issue 28).

Run: ``.venv/bin/python bench/machineset_pass.py [--sizes 100,1000,5000] [--repeats 15]``. Prints the
figures and saves them in bench/results/machineset_pass.json under ``--label`` (default ``latest``;
the file keeps the other labels' runs, so ``before`` and ``after`` can sit side by side: run the
script from a checkout of each; ``--out`` elsewhere; ``--profile FILE`` writes a cProfile of the
passes of the largest size, its figures then inflated).

In process, no Celery and no API server: the whole pass (``machine_set_pass``) runs in its scope
on the recording fake (tests/kube_fake.py) as the unit tests run it, the mirror being a snapshot of
the fake (``FakeKube.listers``: stored JSON bytes, as Redis holds them, read through the process's
parsed-object cache), the queue's expectations in a Redis of the bench's own (a child process, so
its CPU is not counted). The set has N replicas and N machines of its own, as a Running machine
looks (node label, providerID, nodeTemplate, lastOperation, the Node's six conditions). Per size
and scenario, ``--repeats`` passes, each after the change it measures (taken outside the timed
part, with the mirror's snapshot); the CPU of the pass alone (``time.process_time``), median:

- ``steady``: nothing changed since the previous pass (a LongRetry recheck, a wake whose change
  the set does not act on): the status is not written;
- ``changed_25``, ``changed_100``: 25 or 100 machines changed phase since the previous pass
  (Running → Pending and back, as in a scale-up, where each pass finds the machines that moved
  since the last one: a 0 → 1000 scale-up, each machine changing a few times over ~43 passes,
  sees on the order of a hundred a pass): the status is written;
- ``first``: the first pass of a fresh worker process (nothing parsed yet), once per size;
- ``steady_run``: ``--repeats`` steady passes back to back as a worker runs them, with no
  ``gc.collect()`` between them (the other scenarios collect before each timed pass, which hides
  the collections a pass's allocations set off in the passes after it), and ``collections_per_pass``
  during them (``gc.callbacks``).

The timed part is the pass itself and the fake's handling of its writes (the status update, a
dict copy), not the snapshot. CPU time, not wall time: a busy host moves it less than a wall time,
though not nothing (runs of the same code at load 3 and 30 differed up to 1.8× at 5000 machines):
compare runs taken back to back.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import argparse  # noqa: E402
import cProfile  # noqa: E402
import datetime as dt  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from typing import Any  # noqa: E402

from mcm_sandbox.procs import RedisServer  # noqa: E402
from mcm_tasks import kinds  # noqa: E402
from mcm_tasks.api import API_VERSION, MachineSet  # noqa: E402
from mcm_tasks.api.constants import MCM_FINALIZER, NODE_LABEL_KEY  # noqa: E402
from mcm_tasks.controllers.machineset.reconcile import machine_set_pass  # noqa: E402
from mcm_tasks.controllers.machineset.scope import MachineSetScope  # noqa: E402
from mcm_tasks.settings import configure, get_settings, reset_settings  # noqa: E402
from tests.kube_fake import FakeKube  # noqa: E402

RESULTS = ROOT / "bench" / "results"
NS = "bench-set"
SET, DEPLOYMENT, CLASS = "big-abcde", "big", "class-a"
SETS, MACHINES = kinds.MACHINE_SET.resource.plural, kinds.MACHINE.resource.plural
STAMP = "2026-11-29T06:00:00Z"
CLOCK = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
#: machines changed between two passes of ``changed_<n>``
CHANGED = (25, 100)


def _conditions() -> list[dict[str, Any]]:
    types = {"KernelDeadlock": "False", "ReadonlyFilesystem": "False", "MemoryPressure": "False",
             "DiskPressure": "False", "PIDPressure": "False", "Ready": "True"}  # fmt: skip
    return [
        {"type": t, "status": s, "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP,
         "reason": f"Kubelet{t}", "message": f"kubelet reports {t} {s}"}
        for t, s in types.items()
    ]  # fmt: skip


def machine_set(n: int) -> dict[str, Any]:
    template = {"metadata": {"labels": {"name": DEPLOYMENT, "machine-template-hash": "abcde"}},
                "spec": {"class": {"kind": "MachineClass", "name": CLASS},
                         "nodeTemplate": {"metadata": {"labels": {"pool": "a"}}}}}  # fmt: skip
    return {
        "apiVersion": API_VERSION, "kind": "MachineSet",
        "metadata": {"name": SET, "namespace": NS, "finalizers": [MCM_FINALIZER],
                     "labels": {"name": DEPLOYMENT, "machine-template-hash": "abcde"}},
        "spec": {"replicas": n, "template": template,
                 "selector": {"matchLabels": {"name": DEPLOYMENT, "machine-template-hash": "abcde"}}},
    }  # fmt: skip


def machine(i: int, set_uid: str) -> dict[str, Any]:
    name = f"{SET}-{i:05d}"
    return {
        "apiVersion": API_VERSION, "kind": "Machine",
        "metadata": {
            "name": name, "namespace": NS,
            "labels": {"name": DEPLOYMENT, "machine-template-hash": "abcde", NODE_LABEL_KEY: name},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": "MachineSet", "name": SET, "uid": set_uid,
                                 "controller": True, "blockOwnerDeletion": True}],
            "finalizers": [MCM_FINALIZER],
        },
        "spec": {"class": {"kind": "MachineClass", "name": CLASS}, "providerID": f"local:///zone-a/i-{i:08x}",
                 "nodeTemplate": {"metadata": {"labels": {"pool": "a"}}}},
        "status": {
            "conditions": _conditions(),
            "currentStatus": {"phase": "Running", "timeoutActive": False, "lastUpdateTime": STAMP},
            "lastOperation": {"description": "Machine is running", "state": "Successful",
                              "type": "HealthCheck", "lastUpdateTime": STAMP},
            "node": name,
        },
    }  # fmt: skip


class Fleet:
    """One set of ``n`` machines on a fake, with the clock its passes read."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.kube = FakeKube([{"apiVersion": API_VERSION, "kind": "MachineClass",
                               "metadata": {"name": CLASS, "namespace": NS}, "providerSpec": {},
                               "provider": "local"}], now=CLOCK)  # fmt: skip
        uid = self.kube.add(machine_set(n))["metadata"]["uid"]
        for i in range(n):
            self.kube.add(machine(i, uid))
        self.clock = CLOCK
        self.flips = 0

    def flip(self, count: int) -> None:
        """``count`` machines change phase (Running → Pending, or back), as another writer's."""
        for _ in range(count):
            i = self.flips % self.n
            self.flips += 1
            name = f"{SET}-{i:05d}"

            def toggle(obj: dict[str, Any]) -> None:
                current = obj["status"]["currentStatus"]
                current["phase"] = "Pending" if current["phase"] == "Running" else "Running"

            self.kube.change(MACHINES, name, NS, toggle)

    def prepare(self) -> MachineSetScope:
        """The scope of the next pass (untimed: the set's read, the mirror's snapshot)."""
        self.clock += timedelta(seconds=2)
        raw = self.kube.get_object(SETS, SET, NS)
        assert raw is not None
        clock = self.clock
        return MachineSetScope(key=f"{NS}/{SET}", obj=MachineSet.model_validate(raw), settings=get_settings(),
                               listers=self.kube.listers(NS), clients=(self.kube, self.kube),
                               now=clock, clock=lambda: clock, precise_clock=lambda: clock)  # fmt: skip


def timed(scope: MachineSetScope, profile: cProfile.Profile | None) -> float:
    """CPU milliseconds of one pass."""
    if profile is not None:
        profile.enable()
    start = time.process_time()
    machine_set_pass(scope)
    spent = time.process_time() - start
    if profile is not None:
        profile.disable()
    return spent * 1000


def measure(n: int, repeats: int, profile: cProfile.Profile | None) -> dict[str, Any]:
    from mcm_tasks.cache.models import _caches

    _caches.clear()  # a fresh worker process: nothing parsed yet
    fleet = Fleet(n)
    out: dict[str, Any] = {"first": round(timed(fleet.prepare(), None), 2)}
    scenarios: dict[str, Callable[[], None]] = {"steady": lambda: None}
    for count in CHANGED:
        scenarios[f"changed_{count}"] = lambda count=count: fleet.flip(count)  # type: ignore[misc]
    for name, change in scenarios.items():
        timed(fleet.prepare(), None)  # the previous scenario's last change, settled
        samples = []
        for _ in range(repeats):
            change()
            scope = fleet.prepare()
            gc.collect()
            samples.append(timed(scope, profile))
        out[name] = round(statistics.median(samples), 2)
        out[f"{name}_min"] = round(min(samples), 2)
        out[f"{name}_max"] = round(max(samples), 2)
    timed(fleet.prepare(), None)
    collections = [0]

    def count(phase: str, info: dict[str, Any]) -> None:
        collections[0] += phase == "start"

    scopes = [fleet.prepare() for _ in range(repeats)]  # prepared first: their garbage is not the pass's
    gc.collect()
    gc.callbacks.append(count)
    try:
        run = [timed(scope, None) for scope in scopes]
    finally:
        gc.callbacks.remove(count)
    out["steady_run"] = round(statistics.median(run), 2)
    out["steady_run_mean"] = round(statistics.mean(run), 2)
    out["collections_per_pass"] = round(collections[0] / repeats, 1)
    writes = fleet.kube.writes(SETS, MACHINES)
    out["writes"] = sorted(
        {f"{a.verb} {a.resource}{'/' + a.subresource if a.subresource else ''}" for a in writes}
    )
    return out


def source_version() -> str:
    try:
        found = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                               text=True, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return found.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000", help="machines per set, comma-separated")
    parser.add_argument("--repeats", type=int, default=15, help="passes per size and scenario")
    parser.add_argument("--out", type=Path, default=RESULTS / "machineset_pass.json")
    parser.add_argument("--label", default="latest", help="the key this run's figures are saved under")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile of the largest size's passes")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        redis_server = RedisServer(Path(tmp) / "redis").start()
        try:
            configure({"redis_url": redis_server.url, "namespace": NS})
            figures: dict[str, Any] = {}
            for n in sizes:
                profile = cProfile.Profile() if args.profile is not None and n == max(sizes) else None
                figures[str(n)] = measure(n, args.repeats, profile)
                print(n, json.dumps(figures[str(n)]), flush=True)
                if profile is not None:
                    profile.dump_stats(str(args.profile))
        finally:
            reset_settings()
            redis_server.stop()
    run = {
        "cpu_ms_per_pass": figures,
        "context": {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "commit": source_version(),
            "repeats": args.repeats,
            "python": platform.python_version(),
            "load_avg": os.getloadavg(),
        },
    }
    saved: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    saved[args.label] = run
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(saved, indent=2) + "\n")
    print(json.dumps(run, indent=2))
    print(f"saved {args.out} [{args.label}]")


if __name__ == "__main__":
    main()
