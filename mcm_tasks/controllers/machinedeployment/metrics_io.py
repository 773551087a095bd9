"""The scrape of MCM's ``mcm_machine_deployment_*`` metrics: the informers' mirror of the
MachineDeployments read at each scrape and handed to ``metrics.machine_deployment_metrics``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from mcm_tasks.cache import get_listers
from mcm_tasks.controllers.machinedeployment.metrics import machine_deployment_metrics


class MachineDeploymentMetricsCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from machine_deployment_metrics(get_listers().machine_deployments.list())
