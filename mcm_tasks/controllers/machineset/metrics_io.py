"""MCM's ``mcm_machine_stale_machines_total`` in Redis, and the scrape of every ``mcm_machine_set_*``
metric: the gauges (``metrics.py``) over the informers' mirror of the MachineSets at scrape time, and
the one counter, stale machines removed (Failed by the health check, then deleted by their set), read
from Redis where whichever worker deleted the machine raised it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import redis
from prometheus_client.core import REGISTRY, CollectorRegistry, CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from mcm_tasks.cache import get_listers
from mcm_tasks.controllers.machineset.metrics import machine_set_metrics
from mcm_tasks.redisdb import get_redis, rkey


def stale_machines_key() -> str:
    return rkey("metrics", "stale-machines-removed")


def count_stale_machine_removed(client: redis.Redis | None = None) -> None:
    """Best effort: a metric must never fail a deletion."""
    with contextlib.suppress(redis.RedisError):
        (client or get_redis()).incr(stale_machines_key())


class MachineSetMetricsCollector(Collector):
    def __init__(self, client: redis.Redis | None = None) -> None:
        self.client = client

    def collect(self) -> Iterator[Metric]:
        yield from machine_set_metrics(get_listers().machine_sets.list())
        stale = CounterMetricFamily(
            "mcm_machine_stale_machines",
            "Number of stale machines removed (Failed by the health check, deleted by their set).",
        )
        raw = (self.client or get_redis()).get(stale_machines_key())
        stale.add_metric([], float(raw or 0))
        yield stale


def register_machine_set_metrics(
    registry: CollectorRegistry = REGISTRY, client: redis.Redis | None = None
) -> None:
    registry.register(MachineSetMetricsCollector(client))
