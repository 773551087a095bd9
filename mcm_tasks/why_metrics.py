"""The metrics the chart's alerts and dashboard need beyond MCM's, computed at scrape time:

- ``mcm_condition_seconds{kind,type,reason}`` (fleet): for each kind (machine, machineset,
  machinedeployment), condition type and reason some object holds now, the longest time any object
  has held it (since the condition's ``lastTransitionTime``). One series per (kind, type, reason), not
  per object, so a fleet of thousands stays a handful of series; the per-object conditions are MCM's
  ``mcm_machine*_status_condition`` gauges. "How long has the oldest machine been WaitingForNode"
  reads ``mcm_condition_seconds{kind="machine",type="Creating",reason="WaitingForNode"}``.
- ``mcm_workqueue_longest_failing_seconds{name}`` (fleet): per queue, how long its oldest failure
  streak has lasted (0 when nothing fails); the "keys failing longer than N minutes" alert.
- ``mcm_redis_up`` (every process): 1 when this process's Redis answered a PING at the scrape, else 0.
  The fleet metrics come from Redis and vanish with it, so the Redis alert needs a series that stays.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import redis
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mcm_tasks.api.meta import Condition

log = logging.getLogger(__name__)


def condition_seconds(
    objects: Iterable[tuple[str, Sequence[Condition]]], now: datetime
) -> dict[tuple[str, str, str], float]:
    """(kind, type, reason) → the longest time, in seconds, any object of the kind has held it (pure)."""
    out: dict[tuple[str, str, str], float] = {}
    for kind, conditions in objects:
        for c in conditions:
            since = c.last_transition_time
            seconds = 0.0 if since is None else max((now - since).total_seconds(), 0.0)
            key = (kind, str(c.type), c.reason)
            out[key] = max(out.get(key, 0.0), seconds)
    return out


def condition_metric(values: dict[tuple[str, str, str], float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "mcm_condition_seconds",
        "Longest time any object of the kind has held the condition type with this reason, in seconds.",
        labels=["kind", "type", "reason"],
    )
    for (kind, type_, reason), seconds in sorted(values.items()):
        family.add_metric([kind, type_, reason], round(seconds, 3))
    return family


class ConditionCollector(Collector):
    """``mcm_condition_seconds`` from the mirror (a fleet metric: only the leading informer exports it)."""

    def collect(self) -> Iterator[Metric]:
        from mcm_tasks.api import now_utc
        from mcm_tasks.cache import get_listers

        listers = get_listers()
        objects: list[tuple[str, Sequence[Any]]] = []
        objects += [("machine", m.status.conditions) for m in listers.machines.list()]
        objects += [("machineset", s.status.conditions) for s in listers.machine_sets.list()]
        objects += [("machinedeployment", d.status.conditions) for d in listers.machine_deployments.list()]
        yield condition_metric(condition_seconds(objects, now_utc()))


class FailingAgeCollector(Collector):
    """``mcm_workqueue_longest_failing_seconds`` from the queues' failing hashes (fleet)."""

    def collect(self) -> Iterator[Metric]:
        from mcm_tasks.kinds import QUEUES
        from mcm_tasks.queue.state import failing

        now = time.time()
        oldest: dict[str, float] = dict.fromkeys(QUEUES, 0.0)
        for f in failing():
            oldest[f.kind] = max(oldest[f.kind], now - f.since)
        family = GaugeMetricFamily(
            "mcm_workqueue_longest_failing_seconds",
            "How long the queue's oldest failure streak has lasted, in seconds (0: nothing fails).",
            labels=["name"],
        )
        for name, seconds in oldest.items():
            family.add_metric([name], round(max(seconds, 0.0), 3))
        yield family


class RedisUpCollector(Collector):
    """``mcm_redis_up``: this process's Redis answered a PING (never fails the scrape)."""

    def collect(self) -> Iterator[Metric]:
        from mcm_tasks.redisdb import get_redis

        try:
            up = bool(get_redis().ping())
        except (redis.RedisError, OSError) as err:
            log.debug("Redis did not answer the scrape's PING: %s", type(err).__name__)
            up = False
        family = GaugeMetricFamily("mcm_redis_up", "1 when this process's Redis answers, else 0.")
        family.add_metric([], 1.0 if up else 0.0)
        yield family
