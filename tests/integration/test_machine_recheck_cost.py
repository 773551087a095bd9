"""What a healthy Running machine's LongRetry recheck costs: upstream MCM rechecks every machine
every 10 minutes, so an idle fleet of 1000 runs 100 such passes a minute. With nothing to do the pass
writes nothing, calls no API, and the whole delivery is three Redis round trips: the queue contract's
BEGIN, which reads the machine and the mirror's synced kinds ahead (``registry.ReadAhead``), one read
of the freeze flag, class, node and secret (the class's secrets come with the class, as the worker's
last load of the class named them), and END."""

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


def test_a_healthy_running_machine_s_recheck_is_three_round_trips(
    env: Env, apiserver: ApiServer, redis_url: str
) -> None:
    env.settings(long_retry="600s")
    env.start_kubelet()
    cls = env.setup_class()
    name = running_machine(env, "idle", cls)
    registry.unregister_all()
    register(Queue.MACHINE, reconcile_machine, reads=kinds.MACHINE.mirror)
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
        counted, queue_client = (
            redis.Redis(connection_pool=redis.ConnectionPool.from_url(
                redis_url, connection_class=CountingConnection, decode_responses=decode))
            for decode in (False, True)
        )  # fmt: skip
        counted.ping(), queue_client.ping()  # the connections' handshakes
        plain, reader.redis = reader.redis, counted
        try:
            sent = CountingConnection.sent
            delivered = deliver("machine", env.key(name), new_id(), client=queue_client)
            round_trips = CountingConnection.sent - sent
        finally:
            reader.redis = plain
    assert delivered.describe() == "requeue in 600s"
    assert env.get(name).metadata.resource_version == written, "the recheck wrote nothing"
    assert round_trips == 3, "BEGIN with synced kinds + machine; freeze flag + class + secrets + node; END"
