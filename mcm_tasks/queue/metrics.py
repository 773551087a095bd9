"""MCM's workqueue metrics (``mcm_workqueue_*{name=<queue>}``) for the whole installation.

Counters and histograms are kept in Redis by the queue scripts themselves (in the same atomic
step as the queue operation), so they are correct across all worker processes and pods, and any
process can serve them: register ``QueueMetricsCollector`` with a prometheus_client registry.
"""

from __future__ import annotations

from collections.abc import Iterator

import redis
from prometheus_client.core import (
    REGISTRY,
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from mcm_tasks.queue.stats import read_stats


class QueueMetricsCollector(Collector):
    def __init__(self, client: redis.Redis | None = None) -> None:
        self.client = client

    def collect(self) -> Iterator[Metric]:
        stats = read_stats(self.client)
        depth = GaugeMetricFamily("mcm_workqueue_depth", "Current depth of workqueue", labels=["name"])
        adds = CounterMetricFamily(
            "mcm_workqueue_adds_total", "Total number of adds handled by workqueue", labels=["name"]
        )
        retries = CounterMetricFamily(
            "mcm_workqueue_retries_total", "Total number of retries handled by workqueue", labels=["name"]
        )
        queue_duration = HistogramMetricFamily(
            "mcm_workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            labels=["name"],
        )
        work_duration = HistogramMetricFamily(
            "mcm_workqueue_work_duration_seconds",
            "How long in seconds processing an item takes",
            labels=["name"],
        )
        unfinished = GaugeMetricFamily(
            "mcm_workqueue_unfinished_work_seconds",
            "Seconds of work in progress not yet observed by work_duration",
            labels=["name"],
        )
        longest = GaugeMetricFamily(
            "mcm_workqueue_longest_running_processor_seconds",
            "Seconds the longest running processor has been running",
            labels=["name"],
        )
        delayed = GaugeMetricFamily(
            "mcm_workqueue_delayed_keys", "Keys waiting for a requeue-after or backoff", labels=["name"]
        )
        failing = GaugeMetricFamily(
            "mcm_workqueue_failing_keys", "Keys whose last reconcile failed (backing off)", labels=["name"]
        )
        recovered = CounterMetricFamily(
            "mcm_workqueue_recovered",
            "Messages restored from dead workers",
            labels=["name"],
        )
        for s in stats:
            label = [s.kind]
            depth.add_metric(label, s.pending)
            adds.add_metric(label, s.adds)
            retries.add_metric(label, s.retries)
            queue_duration.add_metric(label, s.queue_duration.cumulative(), s.queue_duration.total)
            work_duration.add_metric(label, s.work_duration.cumulative(), s.work_duration.total)
            unfinished.add_metric(label, s.unfinished_seconds)
            longest.add_metric(label, s.longest_running_seconds)
            delayed.add_metric(label, s.delayed)
            failing.add_metric(label, s.failing)
            recovered.add_metric(label, s.recovered)
        yield from (depth, adds, retries, queue_duration, work_duration, unfinished, longest)
        yield from (delayed, failing, recovered)


def register_queue_metrics(registry: CollectorRegistry = REGISTRY, client: redis.Redis | None = None) -> None:
    registry.register(QueueMetricsCollector(client))
