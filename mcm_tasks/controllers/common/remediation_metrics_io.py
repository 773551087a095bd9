"""The scrape of ``mcm_remediation_blocked``: the informers' mirror of the MachineDeployments read at
each scrape and handed to ``remediation_metrics.remediation_blocked``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from mcm_tasks.cache import get_listers
from mcm_tasks.controllers.common.remediation_metrics import remediation_blocked


class RemediationCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield remediation_blocked(get_listers().machine_deployments.list())
