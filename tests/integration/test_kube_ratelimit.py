"""The client-side rate limit is one budget per cluster across processes, enforced under every
request of the official client, against the sandbox API server."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from typing import Any

import pytest
import redis
from kubernetes import watch

from mcm_sandbox.procs import ApiServer, free_port
from mcm_tasks import kinds
from mcm_tasks.kube import clients, ops
from mcm_tasks.kube.ratelimit import limiter_of
from mcm_tasks.settings import configure, load_settings

pytestmark = pytest.mark.integration

QPS, BURST, N = 20.0, 5, 30


def _requests(settings: dict[str, Any], n: int, barrier: Any, out: Any) -> None:
    configure(settings)
    core = clients.get_clusters().control.core
    barrier.wait(60)
    start = time.time()
    for _ in range(n):
        core.list_node(limit=1)
    out.put((start, time.time()))


def test_two_processes_share_one_budget(
    apiserver: ApiServer, redis_url: str, redis_client: redis.Redis
) -> None:
    settings = {
        "control_kubeconfig": str(apiserver.kubeconfig),
        "target_kubeconfig": "none",
        "redis_url": redis_url,
        "kube_api_qps": QPS,
        "kube_api_burst": BURST,
    }
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_requests, args=(settings, N, barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    spans = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(10)
    total = max(end for _, end in spans) - min(start for start, _ in spans)
    # 2N tokens from one bucket: at least (2N - burst) / qps; two private limiters would take half
    assert total >= (2 * N - BURST) / QPS, total
    assert redis_client.exists("mcm:ratelimit:kube:control")


def test_a_watch_takes_one_token_however_long_it_streams(
    apiserver: ApiServer, redis_url: str, redis_client: redis.Redis
) -> None:
    s = load_settings(
        {"control_kubeconfig": str(apiserver.kubeconfig), "target_kubeconfig": "none", "redis_url": redis_url,
         "kube_api_qps": 0.001, "kube_api_burst": 10}
    )  # fmt: skip
    limited = clients.new_cluster("control", str(apiserver.kubeconfig), s)
    writer = clients.new_cluster(
        "writer", str(apiserver.kubeconfig), load_settings({**s.model_dump(), "redis_url": ""})
    )
    ns = "default"
    names = [f"w-{i}-{time.time_ns():x}" for i in range(3)]

    def write() -> None:
        time.sleep(0.3)  # let the watch open first
        for name in names:
            ev = {"metadata": {"name": name}, "involvedObject": {"kind": "Node", "name": name}, "reason": "R"}
            ops.create(writer.api, kinds.EVENT.resource, ev, ns)

    seen = []
    t = threading.Thread(target=write)
    t.start()
    w = watch.Watch()
    for item in w.stream(limited.core.list_namespaced_event, ns, timeout_seconds=2):
        seen.append(item["object"].metadata.name)
        if all(n in seen for n in names):
            w.stop()
    t.join()
    assert all(n in seen for n in names)
    tokens = float(redis_client.hget("mcm:ratelimit:kube:control", "tokens") or 0)
    assert 8.9 < tokens <= 9.01  # one request: the watch's open; its events cost nothing
    limited.close()
    writer.close()


def test_requests_go_on_when_redis_is_down(apiserver: ApiServer) -> None:
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    s = load_settings(
        {
            "control_kubeconfig": str(apiserver.kubeconfig),
            "target_kubeconfig": "none",
            "redis_url": dead_redis,
        }
    )
    cluster = clients.new_cluster("control", str(apiserver.kubeconfig), s)
    assert limiter_of(cluster.api) is not None
    assert isinstance(cluster.core.list_node().items, list)
    cluster.close()


def test_leader_election_renews_outside_the_shared_budget(
    apiserver: ApiServer, redis_url: str, redis_client: redis.Redis
) -> None:
    """Issue 19: every lease renewal (a GET and a PUT each retry period) took two tokens, two Redis
    scripts every 2 s at rest; and a renewal waiting behind a busy fleet's tokens could cost the
    lead. Leader election has a client of its own, as upstream's ``leaderElectionClient``."""
    from informers.leader import LeaderElector

    s = load_settings(
        {"control_kubeconfig": str(apiserver.kubeconfig), "target_kubeconfig": "none", "redis_url": redis_url}
    )
    api = clients.leader_election_client(s)
    assert limiter_of(api) is None
    elector = LeaderElector(api, "default", "me", 15.0, 10.0, 2.0, name="budget-test")
    assert elector.try_acquire_or_renew() and elector.try_acquire_or_renew()
    assert not redis_client.exists("mcm:ratelimit:kube:control"), "no token taken"
    api.close()
