"""MCM's ``mcm_machine_deployment_*`` metrics, computed at scrape time (``metrics_io.py``) from the
informers' mirror of the MachineDeployments (as MCM computes them from its lister), so any process
serves the same figures.
Names and labels follow MCM; values are counts and names, never secret material.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from prometheus_client.core import GaugeMetricFamily, Metric

from mcm_tasks.api import MachineDeployment
from mcm_tasks.controllers.common.metrics import CONDITION_VALUE, FAILED_MACHINE_LABELS
from mcm_tasks.controllers.common.rollout import max_surge, max_unavailable

PREFIX: Final = "mcm_machine_deployment"


def _spec_surge(d: MachineDeployment) -> float:
    try:
        return float(max_surge(d))
    except ValueError:
        return 0.0


def _spec_unavailable(d: MachineDeployment) -> float:
    try:
        return float(max_unavailable(d))
    except ValueError:
        return 0.0


#: (metric name after the prefix, what it reports, how to read it)
_GAUGES: Final[tuple[tuple[str, str, Callable[[MachineDeployment], float]], ...]] = (
    ("info_spec_paused", "spec paused status", lambda d: 1.0 if d.spec.paused else 0.0),
    ("info_spec_replicas", "spec replicas", lambda d: d.spec.replicas),
    ("info_spec_min_ready_seconds", "spec min ready seconds", lambda d: d.spec.min_ready_seconds),
    ("info_spec_rolling_update_max_surge", "spec rolling update max surge", _spec_surge),
    ("info_spec_rolling_update_max_unavailable", "spec rolling update max unavailable", _spec_unavailable),
    (
        "info_spec_revision_history_limit",
        "spec revision history limit",
        lambda d: d.spec.revision_history_limit if d.spec.revision_history_limit is not None else 0,
    ),
    (
        "info_spec_progress_deadline_seconds",
        "spec progress deadline seconds",
        lambda d: d.spec.progress_deadline_seconds if d.spec.progress_deadline_seconds is not None else 0,
    ),
    (
        "info_spec_rollback_to_revision",
        "spec rollback to revision",
        lambda d: d.spec.rollback_to.revision if d.spec.rollback_to is not None else 0,
    ),
    ("status_available_replicas", "status available replicas", lambda d: d.status.available_replicas),
    ("status_unavailable_replicas", "status unavailable replicas", lambda d: d.status.unavailable_replicas),
    ("status_ready_replicas", "status ready replicas", lambda d: d.status.ready_replicas),
    ("status_updated_replicas", "status updated replicas", lambda d: d.status.updated_replicas),
    ("status_collision_count", "status collision count", lambda d: d.status.collision_count or 0),
    ("status_replicas", "status replicas", lambda d: d.status.replicas),
)


def machine_deployment_metrics(deployments: Iterable[MachineDeployment]) -> list[Metric]:
    """The gauges for a list of deployments (pure, so tests read them without Prometheus)."""
    items_list = list(deployments)
    items = GaugeMetricFamily(
        f"{PREFIX}_items_total", "Count of machinedeployments currently managed by the mcm."
    )
    items.add_metric([], len(items_list))
    ident = ["name", "namespace"]
    info = GaugeMetricFamily(
        f"{PREFIX}_info",
        "Information of the Machinedeployments currently managed by the mcm.",
        labels=[*ident, "createdAt", "spec_strategy_type"],
    )
    gauges = [
        (
            GaugeMetricFamily(
                f"{PREFIX}_{name}", f"Information of the Machinedeployments {text}.", labels=ident
            ),
            read,
        )
        for name, text, read in _GAUGES
    ]
    conditions = GaugeMetricFamily(
        f"{PREFIX}_status_condition",
        "Information of the mcm managed Machinedeployments' status conditions.",
        labels=[*ident, "condition"],
    )
    failed = GaugeMetricFamily(
        f"{PREFIX}_failed_machines",
        "Information of the mcm managed Machinedeployments' failed machines.",
        labels=list(FAILED_MACHINE_LABELS),
    )
    for d in items_list:
        meta = d.metadata
        labels = [meta.name or "", meta.namespace or ""]
        created = str(int(meta.creation_timestamp.timestamp())) if meta.creation_timestamp else ""
        info.add_metric([*labels, created, str(d.spec.strategy.type)], 1)
        for family, read in gauges:
            family.add_metric(labels, float(read(d)))
        for cond in d.status.conditions:
            conditions.add_metric([*labels, str(cond.type)], CONDITION_VALUE.get(str(cond.status), 0.0))
        for summary in d.status.failed_machines:
            op = summary.last_operation
            failed.add_metric(
                [*labels, summary.name, summary.provider_id, str(op.state), str(op.type), summary.owner_ref],
                1,
            )
    return [items, info, *(family for family, _ in gauges), conditions, failed]
