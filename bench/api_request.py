"""Client CPU per Kubernetes API request through our one edge (``mcm_tasks.kube.rest`` / ``ops``).

Run: ``.venv/bin/python bench/api_request.py [--scale 0.3] [--profile DIR]``. Prints the figures and
saves bench/results/api_request.json (a ``--scale`` other than 1 saves to the temporary folder).

A machine costs some 15-20 API requests over its life, so the client side CPU of one request is
paid by every reconcile. This measures it alone: a sandbox API server and a Redis of their own (each
a child process, so neither's CPU is counted), and this process sending one kind of request at a
time, sequentially, as a reconcile does. For every verb:

- ``cpu_us``: this process's CPU (user + system, ``time.process_time``) per request, in µs;
- ``wall_us``: wall time per request (the API server's time included; meaningless on a loaded host);

The sandbox's kubeconfig carries a bearer token (``--no-token``: none), as a real cluster's
credentials do: a token makes the client run its refresh hook before every request, and the
process's environment size (``environ_size``) weighs on that hook's cost in the official client.
Two set-ups: ``direct`` (an ``ApiClient`` from the sandbox's kubeconfig, no rate limit) and
``limited`` (the clients the controller builds, ``clients.new_cluster``: the shared token bucket in
Redis drawn through ``LeasedTokens``, at the benchmarks' QPS); ``limited_redis_draws_per_call`` says
how often a call paid a Redis round trip for its token. ``floor.get`` is a bare urllib3 GET over a
pool of its own: what a Python client on urllib3 pays at least; ``floor.compute`` some pure Python
work (JSON of 4 Machines) with no I/O, to compare runs on a host whose speed varies. The cases run
in interleaved rounds, so the load of a shared host weighs on each alike.

Verbs: ``get`` (a Machine), ``patch_merge`` (a Machine's annotation), ``patch_status`` (a
Machine's status, merge patch on the subresource), ``update_status_whole`` and
``update_status_slim`` (a status write as the controller makes it: model in, PUT to the
subresource, model out; with the whole object in the body, or only its identity and status),
``post_event`` (a new Event), ``list`` (a labelled list of 20 Machines), ``record_event``
(``EventRecorder.event``: its Redis scripts and the POST or PATCH of the Event).

``--profile DIR`` also writes a cProfile of each verb (``DIR/<setup>-<verb>.prof``) and puts the
functions with the most own time in the JSON (``context.profile``).
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import argparse  # noqa: E402
import cProfile  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pstats  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from typing import Any  # noqa: E402

import redis  # noqa: E402
import urllib3  # noqa: E402
from kubernetes import config  # noqa: E402
from kubernetes.client import ApiClient  # noqa: E402

from bench.common import BENCH_ENV, RESULTS, context, save  # noqa: E402
from mcm_sandbox.crds import install_crds  # noqa: E402
from mcm_sandbox.procs import ApiServer, RedisServer, scratch_dir  # noqa: E402
from mcm_tasks import kinds  # noqa: E402
from mcm_tasks.api import API_VERSION, Machine, MachineStatus, dump  # noqa: E402
from mcm_tasks.kube import clients, ops  # noqa: E402
from mcm_tasks.kube.events import EventRecorder  # noqa: E402
from mcm_tasks.kube.ratelimit import limiter_of  # noqa: E402
from mcm_tasks.ratelimit import LeasedTokens  # noqa: E402
from mcm_tasks.settings import load_settings  # noqa: E402

NS = "default"
LISTED = 20  # Machines in the listed set
_ = RESULTS  # the default output (bench.common.save)


def machine(name: str, label: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"bench": label, "machine-set": "bench-set-5d8f7c"},
            "annotations": {"note": "x" * 64},
        },
        "spec": {"class": {"kind": "MachineClass", "name": "bench-class"}, "providerID": f"local:///{name}"},
    }


def status_patch(i: int) -> dict[str, Any]:
    """The shape of the controller's status writes: lastOperation, currentStatus, a condition."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "status": {
            "lastOperation": {
                "description": f"Machine bench-{i} successfully joined the cluster",
                "lastUpdateTime": now,
                "state": "Successful",
                "type": "Create",
            },
            "currentStatus": {"phase": "Running", "lastUpdateTime": now, "timeoutActive": False},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": f"ready {i}",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                },
            ],
        }
    }


def event(i: int) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"bench-target.{i:08x}", "namespace": NS},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": "Machine",
            "name": "bench-target",
            "namespace": NS,
            "uid": "0000-1111",
        },
        "reason": "Created",
        "message": f"Created machine bench-target ({i})",
        "type": "Normal",
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": "machine-controller-manager"},
        "reportingComponent": "machine-controller-manager",
    }


def status_writer(api: ApiClient, name: str, slim: bool) -> Callable[[int], Any]:
    """A machine's status write as the controller makes it (``status_io.update_machine_status``):
    the model it holds, a new status, a PUT to the status subresource carrying its resourceVersion,
    the answer parsed into the machine it goes on with. ``slim``: the body is the object's identity
    and status only (``K8sObject.status_body``); else the whole object dumped, as before 30 Nov."""
    res = kinds.MACHINE.resource
    held = [Machine.model_validate(ops.create(api, res, machine(name, "status"), NS))]

    def write(i: int) -> Any:
        status = MachineStatus.model_validate(status_patch(i)["status"])
        sent = held[0].status_body(status) if slim else dump(held[0].model_copy(update={"status": status}))
        held[0] = Machine.model_validate(ops.update_status(api, res, sent, NS))
        return held[0]

    return write


def verbs(api: ApiClient, recorder: EventRecorder, tag: str) -> dict[str, Callable[[int], Any]]:
    res, target = kinds.MACHINE.resource, "bench-target"
    names = itertools.count()  # every POST a new Event, however many passes

    def record(i: int) -> Any:
        # a new message every 4th call: a new Event (POST), else a bump of the last (PATCH)
        obj = {"apiVersion": API_VERSION, "kind": "Machine", "metadata": {"name": target, "namespace": NS}}
        return recorder.event(obj, "Normal", "Bench", f"{tag} {i // 4}")

    return {
        "get": lambda i: ops.get(api, res, target, NS),
        "patch_merge": lambda i: ops.patch(
            api, res, target, {"metadata": {"annotations": {"seq": f"{tag}{i}"}}}, NS
        ),
        "patch_status": lambda i: ops.patch(api, res, target, status_patch(i), NS, subresource="status"),
        "update_status_whole": status_writer(api, f"bench-status-whole-{tag}", slim=False),
        "update_status_slim": status_writer(api, f"bench-status-slim-{tag}", slim=True),
        "post_event": lambda i: ops.create(
            api, kinds.EVENT.resource, _named(event(i), f"{tag}{next(names)}"), NS
        ),
        "list": lambda i: ops.list_(api, res, NS, label_selector="bench=listed"),
        "record_event": record,
    }


def _named(body: dict[str, Any], suffix: str) -> dict[str, Any]:
    body["metadata"]["name"] = f"bench-target.{suffix}"
    return body


def floor(url: str, token: str | None) -> Callable[[int], Any]:
    """A bare keep-alive urllib3 GET of the same Machine, body read and decoded."""
    pool = urllib3.PoolManager()
    path = f"{url}{kinds.MACHINE.resource.path(NS, 'bench-target')}"
    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}

    def get(i: int) -> Any:
        return json.loads(pool.request("GET", path, headers=headers).data)

    return get


def compute(i: int) -> Any:
    """Pure CPU work of a request's size, no I/O: how fast the host ran each set of rounds."""
    return json.loads(json.dumps({"items": [machine(f"m-{i}-{k}", "x") for k in range(4)]}))


@contextmanager
def profiled(out: Path | None, name: str, sink: dict[str, Any]) -> Iterator[None]:
    if out is None:
        yield
        return
    prof = cProfile.Profile(time.process_time)  # CPU, not waits on the server
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        out.mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(out / f"{name}.prof"))
        stats = pstats.Stats(prof)
        rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:15]  # type: ignore[attr-defined]
        sink[name] = [
            {
                "function": f"{Path(f).name}:{line}({fn})",
                "calls": nc,
                "own_s": round(tt, 4),
                "cum_s": round(ct, 4),
            }
            for (f, line, fn), (_cc, nc, tt, ct, _callers) in rows
        ]


ROUNDS = 10


def measure(
    cases: dict[str, Callable[[int], Any]], n: int, rounds: int = ROUNDS
) -> dict[str, dict[str, float]]:
    """CPU and wall time per call of each case: ``n`` calls each, in ``rounds`` interleaved slices,
    so that the load of a shared host weighs on every case alike."""
    for fn in cases.values():  # warm up: connections open, code paths taken once
        for i in range(10):
            fn(-1 - i)
    cpu = dict.fromkeys(cases, 0.0)
    wall = dict.fromkeys(cases, 0.0)
    step = max(1, n // rounds)
    for start in range(0, n, step):
        for name, fn in cases.items():
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for i in range(start, min(n, start + step)):
                fn(i)
            cpu[name] += time.process_time() - cpu0
            wall[name] += time.perf_counter() - wall0
    return {
        name: {"cpu_us": round(cpu[name] / n * 1e6, 1), "wall_us": round(wall[name] / n * 1e6, 1)}
        for name in cases
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    n = max(50, round(args.requests * args.scale))
    work = scratch_dir("mcm-bench-api-request-")
    redis_server = RedisServer(work / "redis").start()
    # credentials, as every real cluster has: a kubeconfig token installs the client's refresh hook
    server = ApiServer(work / "apiserver", extra_args=[] if args.no_token else ["--token", "bench"]).start()
    figures: dict[str, Any] = {"requests_per_verb": n, "token": not args.no_token}
    figures["environ_size"] = len(os.environ)
    profile: dict[str, Any] = {}
    try:
        direct = config.new_client_from_config(config_file=str(server.kubeconfig))
        install_crds(direct)
        for i in range(LISTED):
            ops.create(direct, kinds.MACHINE.resource, machine(f"bench-listed-{i}", "listed"), NS)
        ops.create(direct, kinds.MACHINE.resource, machine("bench-target", "target"), NS)
        settings = load_settings({
            "control_kubeconfig": str(server.kubeconfig), "target_kubeconfig": "none",
            "redis_url": redis_server.url, "kube_api_qps": float(BENCH_ENV["MCM_KUBE_API_QPS"]),
            "kube_api_burst": int(BENCH_ENV["MCM_KUBE_API_BURST"]),
        })  # fmt: skip
        limited = clients.new_cluster("control", str(server.kubeconfig), settings)
        rc = redis.Redis.from_url(redis_server.url)
        cases: dict[str, Callable[[int], Any]] = {}
        for setup, api in {"direct": direct, "limited": limited.api}.items():
            recorder = EventRecorder(api, "bench", redis_client=rc, spam_filter=False)
            for verb, fn in verbs(api, recorder, setup).items():
                cases[f"{setup}/{verb}"] = fn
        cases["floor/get"] = floor(server.url, None if args.no_token else "bench")
        cases["floor/compute"] = compute
        rate_limited = limiter_of(limited.api)
        assert rate_limited is not None and isinstance(rate_limited.limiter, LeasedTokens)
        leased = rate_limited.limiter
        draws0 = leased.draws
        rows = measure(cases, n)
        limited_requests = sum(1 for name in cases if name.startswith("limited/")) * n
        for name, row in rows.items():
            setup, verb = name.split("/")
            figures.setdefault(setup, {})[verb] = row
        figures["limited_redis_draws_per_call"] = round((leased.draws - draws0) / limited_requests, 3)
        if args.profile is not None:  # a pass of its own: the profiler's cost is not in the figures
            for name, fn in cases.items():
                with profiled(args.profile, name.replace("/", "-"), profile):
                    for i in range(n):
                        fn(n + i)
        limited.close()
        direct.close()
    finally:
        server.stop()
        redis_server.stop()
    if profile:
        figures["_profile"] = profile
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per verb and set-up")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the request count")
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default: see bench.common.save)")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile each verb into DIR")
    parser.add_argument("--no-token", action="store_true", help="a sandbox without a bearer token")
    args = parser.parse_args()
    args.workers = 0
    ctx = context(args)
    figures = run(args)
    ctx["profile"] = figures.pop("_profile", None)
    save("api_request", args, figures, ctx)


if __name__ == "__main__":
    main()
