"""The scrape of MCM's ``mcm_machine_*`` state metrics: the machines from the informers' mirror and
the freeze flag from Redis, read at each scrape and handed to ``metrics.machine_metrics``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import REGISTRY, CollectorRegistry, Metric
from prometheus_client.registry import Collector

from mcm_tasks.cache import get_listers
from mcm_tasks.controllers.common.frozen_io import is_frozen
from mcm_tasks.controllers.machine.metrics import machine_metrics


class MachineCollector(Collector):
    """Reads the machines from the mirror at each scrape."""

    def collect(self) -> Iterator[Metric]:
        machines: list[Any] = get_listers().machines.list()
        yield from machine_metrics(machines, is_frozen())


def register_collector(registry: CollectorRegistry = REGISTRY) -> MachineCollector:
    collector = MachineCollector()
    registry.register(collector)
    return collector
