"""What one run of each safety job costs at a fleet of 1000 Running machines (issue 19's idle window).

Run: ``.venv/bin/python bench/safety.py [--scale 0.2] [--runs 5]``. Prints the figures and saves
bench/results/safety.json (a ``--scale`` other than 1 saves to the temporary folder).

One process, no Celery: a sandbox API server (control and target at once), a Redis of ours and a
Redis of the local cloud's (each a child process, so none of their CPU is counted here). The fleet
is created on the API server (a MachineDeployment, its MachineSet, 1000 Machines Running with
their Node's conditions, 1000 Nodes, one class and its secret) and its VMs in the local cloud; an
informer thread mirrors it into Redis, then stops, so the runs measured read a synced, quiet mirror
as a worker does at rest. Each job (``overshooting``, ``apiserver``, ``orphan-vms``) then runs
``--runs`` times through the ``safety`` reconciler, with no coalescing window. Per job:

- ``cpu_ms_first`` / ``cpu_ms`` / ``cpu_ms_min``: this process's CPU (``time.process_time``) of the
  first run (a fresh worker process: nothing parsed yet), the median and the least of the later runs
  (a run the garbage collector's full pass lands in takes up to twice as long);
- ``redis_commands``: commands our Redis ran per run (``INFO commandstats``, scripts' inner
  commands included, the bench's own INFO left out), median; ``redis_round_trips``: requests
  this process sent to it (pipelines count once);
- ``cloud_redis_commands``: the local cloud's (a real cloud's API call stands there);
- ``api_requests``: Kubernetes API requests per run, by verb and resource path.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import base64  # noqa: E402
import cProfile  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from typing import Any  # noqa: E402

import redis  # noqa: E402
from kubernetes import config  # noqa: E402
from kubernetes.client import ApiClient  # noqa: E402

from bench.common import context, parse_args, save, scaled  # noqa: E402
from mcm_sandbox.crds import install_crds  # noqa: E402
from mcm_sandbox.procs import ApiServer, RedisServer, wait_until  # noqa: E402
from mcm_sandbox.testing.informers import InformerThread  # noqa: E402
from mcm_tasks import kinds  # noqa: E402
from mcm_tasks.api import API_VERSION  # noqa: E402
from mcm_tasks.api.constants import NODE_LABEL_KEY  # noqa: E402
from mcm_tasks.controllers.safety import APISERVER, ORPHAN_VMS, OVERSHOOTING  # noqa: E402
from mcm_tasks.kube import ops, rest  # noqa: E402
from mcm_tasks.kube.clients import reset_clusters  # noqa: E402
from mcm_tasks.settings import configure, get_settings  # noqa: E402
from providers.local import LocalCloud, LocalVM  # noqa: E402

NS = "bench-safety"
CLASS, SECRET, DEPLOYMENT, SET = "class-a", "class-secret", "big", "big-abcde"
JOBS = (OVERSHOOTING, APISERVER, ORPHAN_VMS)
STAMP = "2026-11-25T20:00:00Z"
#: ``MCM_BENCH_PROFILE=DIR``: a cProfile of each job's runs in DIR/<job>.prof (CPU figures then inflated)
PROFILE = Path(os.environ["MCM_BENCH_PROFILE"]) if os.environ.get("MCM_BENCH_PROFILE") else None


def _conditions() -> list[dict[str, Any]]:
    """A Running machine's conditions, copied from its Node as the health check does."""
    types = {"KernelDeadlock": "False", "ReadonlyFilesystem": "False", "MemoryPressure": "False",
             "DiskPressure": "False", "PIDPressure": "False", "Ready": "True"}  # fmt: skip
    return [
        {"type": t, "status": s, "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP,
         "reason": f"Kubelet{t}", "message": f"kubelet reports {t} {s}"}
        for t, s in types.items()
    ]  # fmt: skip


def name_of(i: int) -> str:
    return f"{SET}-{i:05d}"


def provider_id(i: int) -> str:
    return f"local:///zone-a/i-{i:08x}"


def machine(i: int, set_uid: str) -> dict[str, Any]:
    name = name_of(i)
    return {
        "apiVersion": API_VERSION, "kind": "Machine",
        "metadata": {
            "name": name, "namespace": NS,
            "labels": {"name": DEPLOYMENT, "machine-template-hash": "abcde", NODE_LABEL_KEY: name},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": "MachineSet", "name": SET, "uid": set_uid,
                                 "controller": True, "blockOwnerDeletion": True}],
            "finalizers": ["machine.sapcloud.io/machine-controller-manager"],
        },
        "spec": {"class": {"kind": "MachineClass", "name": CLASS}, "providerID": provider_id(i),
                 "nodeTemplate": {"metadata": {"labels": {"pool": "a"}}}},
    }  # fmt: skip


def machine_status() -> dict[str, Any]:
    return {
        "conditions": _conditions(),
        "currentStatus": {"phase": "Running", "timeoutActive": False, "lastUpdateTime": STAMP},
        "lastOperation": {"description": "Machine big-abcde is running", "state": "Successful",
                          "type": "HealthCheck", "lastUpdateTime": STAMP},
    }  # fmt: skip


def node(i: int) -> dict[str, Any]:
    name = name_of(i)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                              "node.machine.sapcloud.io/machine-name": name},
                     "finalizers": ["node.machine.sapcloud.io/drain"]},
        "spec": {"providerID": provider_id(i)},
        "status": {
            "conditions": _conditions(),
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"}],
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "v1.30.0", "osImage": "sandbox"},
            "images": [{"names": [f"registry/image-{k}:v1"], "sizeBytes": 1000} for k in range(5)],
        },
    }  # fmt: skip


def vm(i: int) -> LocalVM:
    return LocalVM(
        id=f"i-{i:08x}", provider_id=provider_id(i), machine=name_of(i), namespace=NS,
        machine_class=f"{NS}/{CLASS}", zone="zone-a", region="local", instance_type="small",
        architecture="amd64", internal_ip=f"10.0.{i // 250}.{i % 250}", created=0.0, ready_at=0.0,
    )  # fmt: skip


def build_fleet(api: ApiClient, cloud: LocalCloud, n: int) -> None:
    install_crds(api)
    rest.request(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
    user_data = base64.b64encode(b"#!/bin/sh\n").decode()
    ops.create(
        api, kinds.SECRET.resource, {"metadata": {"name": SECRET}, "data": {"userData": user_data}}, NS
    )
    ops.create(api, kinds.MACHINE_CLASS.resource, {
        "apiVersion": API_VERSION, "kind": "MachineClass", "metadata": {"name": CLASS, "namespace": NS},
        "provider": "local", "providerSpec": {}, "secretRef": {"name": SECRET, "namespace": NS},
    }, NS)  # fmt: skip
    template = {"metadata": {"labels": {"name": DEPLOYMENT}},
                "spec": {"class": {"kind": "MachineClass", "name": CLASS}}}  # fmt: skip
    selector = {"matchLabels": {"name": DEPLOYMENT}}
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    md = ops.create(api, kinds.MACHINE_DEPLOYMENT.resource, {
        "apiVersion": API_VERSION, "kind": "MachineDeployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NS},
        "spec": {"replicas": n, "selector": selector, "template": template, "strategy": rolling},
    }, NS)  # fmt: skip
    ms = ops.create(api, kinds.MACHINE_SET.resource, {
        "apiVersion": API_VERSION, "kind": "MachineSet",
        "metadata": {"name": SET, "namespace": NS, "labels": {"name": DEPLOYMENT}, "ownerReferences": [
            {"apiVersion": API_VERSION, "kind": "MachineDeployment", "name": DEPLOYMENT,
             "uid": md["metadata"]["uid"], "controller": True}]},
        "spec": {"replicas": n, "selector": selector, "template": template},
    }, NS)  # fmt: skip
    set_uid = ms["metadata"]["uid"]

    def one(i: int) -> None:
        created = ops.create(api, kinds.MACHINE.resource, machine(i, set_uid), NS)
        ops.update_status(api, kinds.MACHINE.resource, {**created, "status": machine_status()})
        ops.create(api, kinds.NODE.resource, node(i))
        cloud.insert(vm(i))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


# --- counting ----------------------------------------------------------------------------------------------


class Requests:
    """Kubernetes API requests of this process, as (verb, path without names)."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._call = ApiClient.call_api

        def counting(client: ApiClient, method: str, url: str, *a: Any, **kw: Any) -> Any:
            path = url.split("://", 1)[-1].partition("/")[2].split("?")[0]
            self.seen[f"{method} /{path}"] += 1
            return self._call(client, method, url, *a, **kw)

        ApiClient.call_api = counting  # type: ignore[method-assign]

    def take(self) -> dict[str, int]:
        out, self.seen = dict(self.seen), Counter()
        return out


def commandstats(client: redis.Redis) -> Counter[str]:
    stats = client.info("commandstats").items()
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats if k != "cmdstat_info"})


class RoundTrips:
    """Requests this process sends to our Redis (a pipeline or a script is one)."""

    def __init__(self) -> None:
        self.count = 0
        send = redis.connection.AbstractConnection.send_packed_command

        def counting(conn: Any, command: Any, check_health: bool = True) -> None:
            if conn.port == self.port:
                self.count += 1
            send(conn, command, check_health)

        self.port = 0
        redis.connection.AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]


def run_job(
    job: str, ours: redis.Redis, cloud: redis.Redis, requests: Requests, trips: RoundTrips
) -> dict[str, Any]:
    from mcm_tasks.controllers.safety.register import reconcile_safety

    before, cloud_before, trips_before = commandstats(ours), commandstats(cloud), trips.count
    requests.take()
    profiler = cProfile.Profile() if PROFILE else None
    started = time.process_time()
    if profiler is not None:
        profiler.runcall(reconcile_safety, job)
    else:
        reconcile_safety(job)
    cpu = time.process_time() - started
    if profiler is not None and PROFILE is not None:
        profiler.dump_stats(PROFILE / f"{job}.prof")
    trips_after = trips.count
    commands = commandstats(ours) - before
    return {
        "cpu_ms": cpu * 1000,
        "redis_commands": sum(commands.values()),
        "redis_by_command": dict(commands),
        "redis_round_trips": trips_after - trips_before,
        "cloud_redis_commands": sum((commandstats(cloud) - cloud_before).values()),
        "api_requests": requests.take(),
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    later = runs[1:] or runs
    last = later[-1]
    return {
        "cpu_ms_first": round(runs[0]["cpu_ms"], 2),
        "cpu_ms": round(statistics.median(r["cpu_ms"] for r in later), 2),
        "cpu_ms_min": round(min(r["cpu_ms"] for r in later), 2),
        "cpu_ms_runs": [round(r["cpu_ms"], 2) for r in runs],
        "redis_commands": statistics.median(r["redis_commands"] for r in later),
        "redis_round_trips": statistics.median(r["redis_round_trips"] for r in later),
        "redis_by_command": last["redis_by_command"],
        "cloud_redis_commands": statistics.median(r["cloud_redis_commands"] for r in later),
        "api_requests": sum(last["api_requests"].values()),
        "api_by_request": last["api_requests"],
    }


def main() -> None:
    def extra(parser: Any) -> None:
        parser.add_argument("--runs", type=int, default=5, help="runs of each job (the first is cold)")

    args = parse_args(__doc__.splitlines()[0], extra)
    n = scaled(1000, args.scale)
    with tempfile.TemporaryDirectory(prefix="mcm-bench-safety-") as tmp:
        work = Path(tmp)
        ours_server = RedisServer(work / "ours").start()
        cloud_server = RedisServer(work / "cloud").start()
        apiserver = ApiServer(work).start()
        try:
            configure({
                "control_kubeconfig": str(apiserver.kubeconfig),
                "target_kubeconfig": str(apiserver.kubeconfig),
                "namespace": NS, "redis_url": ours_server.url, "local_cloud_redis_url": cloud_server.url,
                "watch_timeout": 30, "watch_client_timeout": 40, "leader_elect": False,
                "kube_api_qps": 2000, "kube_api_burst": 2000, "safety_event_min_interval": "0s",
            })  # fmt: skip
            reset_clusters()
            api = config.new_client_from_config(config_file=str(apiserver.kubeconfig))
            ours, cloud = redis.Redis.from_url(ours_server.url), redis.Redis.from_url(cloud_server.url)
            t0 = time.monotonic()
            build_fleet(api, LocalCloud(cloud), n)
            built = time.monotonic() - t0
            with InformerThread(get_settings()) as informer:
                wait_until(informer.synced, 300, what="mirror synced")
            requests, trips = Requests(), RoundTrips()
            trips.port = ours_server.port
            figures: dict[str, Any] = {"machines": n, "nodes": n, "runs": args.runs}
            details: dict[str, Any] = {}
            for job in JOBS:
                runs = [run_job(job, ours, cloud, requests, trips) for _ in range(args.runs)]
                s = summary(runs)
                details[job] = s
                key = job.replace("-", "_")
                figures[f"{key}_cpu_ms_first"] = s["cpu_ms_first"]
                figures[f"{key}_cpu_ms"] = s["cpu_ms"]
                figures[f"{key}_cpu_ms_min"] = s["cpu_ms_min"]
                figures[f"{key}_redis_commands"] = s["redis_commands"]
                figures[f"{key}_redis_round_trips"] = s["redis_round_trips"]
                figures[f"{key}_api_requests"] = s["api_requests"]
            api.close()
        finally:
            apiserver.stop()
            cloud_server.stop()
            ours_server.stop()
    ctx = context(args)
    ctx["jobs"] = details
    ctx["fleet_build_seconds"] = round(built, 1)
    save("safety", args, figures, ctx)


if __name__ == "__main__":
    main()
