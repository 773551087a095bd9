"""A worker process with the AWS driver, configured as production is (only settings, no driver
options), draws its EC2 requests from the shared token bucket in Redis.

The worker serves the ``safety`` queue; the orphan-VM job lists the VMs of an AWS MachineClass on a
moto server (DescribeInstances). The bucket's burst is large and its refill negligible, so the tokens
missing from it count the EC2 requests that went through the limiter.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mcm_sandbox.procs import ApiServer, ManagedProcess, wait_until
from mcm_tasks.controllers.safety import ORPHAN_VMS
from mcm_tasks.kinds import Queue
from mcm_tasks.queue import enqueue
from mcm_tasks.redisdb import rkey
from tests.integration.machine_support import USER_DATA, Env
from tests.integration.moto_fixture import ACCESS_KEY_ID, SECRET_ACCESS_KEY, AwsWorld, world_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


BURST = 1000
WAIT = 60.0


@pytest.fixture()
def worker(env: Env, apiserver: ApiServer, aws_world: AwsWorld, tmp_path: Path) -> Iterator[ManagedProcess]:
    proc = ManagedProcess(
        [sys.executable, "-m", "mcm_tasks.worker_cli", "worker", "--queues", "safety", "--concurrency", "1",
         "--loglevel", "info", "--hostname", "aws-limit@%h"],
        tmp_path / "worker.log",
        env={
            **os.environ,
            "MCM_REDIS_URL": env.redis_url,
            "MCM_CONTROL_KUBECONFIG": str(apiserver.kubeconfig),
            "MCM_TARGET_KUBECONFIG": "none",
            "MCM_NAMESPACE": env.namespace,
            "MCM_RECONCILER_MODULES": "mcm_tasks.controllers.safety.register",
            "MCM_SAFETY_EVENT_MIN_INTERVAL": "0s",
            "MCM_AWS_ENDPOINT_URL": aws_world.url,
            "MCM_AWS_RATE_LIMIT_QPS": "0.001",
            "MCM_AWS_RATE_LIMIT_BURST": str(BURST),
        },
    )  # fmt: skip
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def buckets(client: redis.Redis) -> dict[str, float]:
    """Tokens left in each EC2 bucket (one per account and region)."""
    out = {}
    for key in client.scan_iter(match=rkey("ratelimit", "aws") + ":*"):
        tokens = client.hget(key, "tokens")
        if tokens is not None:
            out[key.decode()] = float(tokens)
    return out


def test_a_worker_sends_its_ec2_requests_through_the_shared_limiter(
    env: Env, aws_world: AwsWorld, worker: ManagedProcess
) -> None:
    secret = f"{env.prefix}-aws"
    env.secret(
        secret,
        {
            "providerAccessKeyId": ACCESS_KEY_ID.encode(),
            "providerSecretAccessKey": SECRET_ACCESS_KEY.encode(),
            "userData": USER_DATA,
        },
    )
    env.machine_class(f"{env.prefix}-aws", world_spec(aws_world), secret=secret, provider="AWS")
    client = redis.Redis.from_url(env.redis_url)
    assert buckets(client) == {}

    enqueue(Queue.SAFETY, ORPHAN_VMS)

    def drawn() -> bool:
        if not worker.alive():
            raise AssertionError(f"worker exited:\n{worker.log_tail()}")
        return any(tokens < BURST for tokens in buckets(client).values())

    wait_until(drawn, WAIT, what=f"EC2 requests through the shared bucket; worker log:\n{worker.log_tail()}")
    [(key, tokens)] = buckets(client).items()
    assert key.endswith(":eu-west-1")
    assert BURST - tokens >= 1
