"""``mcm_remediation_blocked``: per MachineDeployment, 1 while its ``RemediationAllowed`` condition is
False (a short-circuit or a zone outage holds its unhealthy machines), else 0. Read at scrape time
(``remediation_metrics_io.py``) from the mirror of the deployments, so every process serves the same
figures; deployments never held (no condition) report 0."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily

from mcm_tasks.api import MachineDeployment
from mcm_tasks.api.meta import get_condition
from mcm_tasks.controllers.common.remediation import REMEDIATION_ALLOWED


def remediation_blocked(deployments: Iterable[MachineDeployment]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "mcm_remediation_blocked",
        "1 while a MachineDeployment's remediation is blocked (RemediationAllowed=False), by reason",
        labels=["name", "namespace", "reason"],
    )
    for d in deployments:
        current = get_condition(d.status.conditions, REMEDIATION_ALLOWED)
        blocked = current is not None and current.status == "False"
        reason = current.reason if blocked and current is not None else ""
        family.add_metric(
            [d.metadata.name or "", d.metadata.namespace or "", reason], 1.0 if blocked else 0.0
        )
    return family
