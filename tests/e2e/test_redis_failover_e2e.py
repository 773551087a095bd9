"""Redis without a single point of failure (issue 17), end to end: the whole sandbox (informer, two
workers, beat, kubelet) on a Sentinel group of real servers (a master, a replica, three sentinels).
The master is SIGKILLed while a MachineDeployment scales to 30: a replica is promoted, every process
carries on without a restart, the scale completes with exactly one VM per machine, and the queues
drain (nothing stranded)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import config
from kubernetes.client import ApiClient

from mcm_sandbox.procs import wait_until
from mcm_sandbox.redis_ha import SentinelGroup
from mcm_sandbox.runner import Sandbox, _alive
from mcm_tasks.redisdb import close_all, get_redis
from mcm_tasks.settings import configure, reset_settings
from providers.local import LocalCloud
from tests.e2e.pools import create_pool, machines, phase
from tests.e2e.support import running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

NS = "default"
REPLICAS = 30
WAIT = 240.0
ENV = {
    "MCM_LONG_RETRY": "10s",
    "MCM_CLASS_RESYNC_PERIOD": "10s",
    # a command waits out the failover (about 2 s here) well inside a reconcile's time limit
    "MCM_RECONCILE_LOCK_TTL": "20s",
    "MCM_VISIBILITY_TIMEOUT": "40s",
    "MCM_REDIS_FAILOVER_TIMEOUT": "10s",
}


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    started = SentinelGroup(Path(tmp_path_factory.mktemp("sentinel-group"))).start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory, group: SentinelGroup) -> Iterator[Sandbox]:
    directory = Path(tmp_path_factory.mktemp("failover-e2e"))
    with running_sandbox(directory, {**ENV, **group.env()}, redis_env=group.env()) as started:
        yield started


@pytest.fixture(scope="module")
def clients(sandbox: Sandbox) -> Iterator[tuple[ApiClient, redis.Redis]]:
    settings = sandbox.redis_settings()
    configure(
        {
            "redis_url": settings.redis_url,
            "redis_sentinel_master": settings.redis_sentinel_master,
            "redis_failover_timeout": "10s",
            "control_kubeconfig": str(sandbox.kubeconfig),
        }
    )
    control = config.new_client_from_config(config_file=str(sandbox.kubeconfig))
    try:
        yield control, get_redis(decode=False)
    finally:
        control.close()
        close_all()
        reset_settings()


def observe(control: ApiClient, client: redis.Redis) -> dict[str, Any]:
    items = machines(control)
    vms = [vm for vm in LocalCloud(client).all() if vm.live()]
    per_machine = Counter(vm.machine for vm in vms)
    return {
        "stuck": {
            m["metadata"]["name"]: ((m.get("status") or {}).get("lastOperation") or {}).get("description")
            for m in items
            if phase(m) != "Running"
        },
        "machines": len(items),
        "running": sum(1 for m in items if phase(m) == "Running"),
        "vms": len(vms),
        "duplicated": sorted(name for name, n in per_machine.items() if n > 1),
    }


def test_killing_the_master_during_a_30_machine_scale(
    group: SentinelGroup, sandbox: Sandbox, clients: tuple[ApiClient, redis.Redis]
) -> None:
    control, client = clients
    create_pool(control, "ha", REPLICAS, provider_spec={"bootDelaySeconds": 0.5})
    last: dict[str, Any] = {}

    def at_least(n: int) -> bool:
        last.update(observe(control, client))
        return bool(last["vms"] >= n)

    wait_until(lambda: at_least(5), WAIT, interval=0.2, what="the scale under way")
    pids = {name: pid for name, pid in sandbox.pids.items() if not name.startswith("apiserver")}
    old, new = group.kill_master()
    assert new != old

    def completed() -> bool:
        last.update(observe(control, client))
        return last["running"] == REPLICAS and last["vms"] == REPLICAS and last["machines"] == REPLICAS

    try:
        wait_until(completed, WAIT, interval=0.5, what="the scale completed after the failover")
    except TimeoutError as err:
        raise AssertionError(f"after the failover: {last}") from err
    assert not last["duplicated"], f"machines with more than one VM: {last['duplicated']}"
    dead = [name for name, pid in pids.items() if not _alive(pid)]
    assert not dead, f"processes that did not survive the failover: {dead}"
    master = redis.Redis(host=group.host, port=new)
    try:
        assert master.info("replication")["role"] == "master"
    finally:
        master.close()
