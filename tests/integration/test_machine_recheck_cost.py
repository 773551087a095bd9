"""What a healthy Running machine's LongRetry recheck costs: upstream MCM rechecks every machine
every 10 minutes, so an idle fleet of 1000 runs 100 such passes a minute. With nothing to do the pass
writes nothing, calls no API, and reads the mirror (machine, freeze flag, class, node, secret) in two
Redis round trips, around the queue contract's two scripts: the class's secrets come with the class,
as the worker's last load of the class named them."""

from __future__ import annotations

import pytest
import redis

from mcm_sandbox.procs import ApiServer, wait_until
from mcm_sandbox.testing.informers import InformerThread, sandbox_settings
from mcm_tasks import kinds
from mcm_tasks.cache import get_reader
from mcm_tasks.cache.layout import object_key, objects_key
from mcm_tasks.controllers.common.registration import register
from mcm_tasks.controllers.machine.reconcile import reconcile_machine
from mcm_tasks.kinds import Queue
from mcm_tasks.queue import registry
from mcm_tasks.queue.messages import new_id
from mcm_tasks.queue.processing import deliver
from mcm_tasks.redisdb import get_redis
from tests.integration.machine_support import Env, running_machine
from tests.integration.queue_support import CountingConnection

pytestmark = pytest.mark.integration


def test_a_healthy_running_machine_s_recheck_reads_the_mirror_in_two_round_trips(
    env: Env, apiserver: ApiServer, redis_url: str
) -> None:
    env.settings(long_retry="600s")
    env.start_kubelet()
    cls = env.setup_class()
    name = running_machine(env, "idle", cls)
    registry.unregister_all()
    register(Queue.MACHINE, reconcile_machine)
    mirrored = get_redis()
    with InformerThread(sandbox_settings(apiserver.kubeconfig, redis_url, env.namespace)) as informer:
        wait_until(informer.synced, 15, what="mirror synced")
        assert deliver("machine", env.key(name), new_id()).describe() == "requeue in 600s"
        written = env.get(name).metadata.resource_version
        wait_until(
            lambda: f'"resourceVersion":"{written}"' in (mirrored.hget(objects_key(kinds.MACHINE.mirror),
                                                                    object_key(env.namespace, name)) or ""),
            15, what="the mirror to hold the machine as written",
        )  # fmt: skip
        reader = get_reader()
        counted = redis.Redis(
            connection_pool=redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
        )
        counted.ping()  # the connection's handshake
        plain, reader.redis = reader.redis, counted
        try:
            sent = CountingConnection.sent
            assert deliver("machine", env.key(name), new_id()).describe() == "requeue in 600s"
            reads = CountingConnection.sent - sent
        finally:
            reader.redis = plain
    assert env.get(name).metadata.resource_version == written, "the recheck wrote nothing"
    assert reads == 2, "synced kinds + machine; freeze flag + class + its secrets + node"
