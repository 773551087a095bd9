"""MCM's ``mcm_machine_set_*`` metrics and ``mcm_machine_stale_machines_total``, for the whole
installation.

The gauges are read at scrape time from the informers' mirror of the MachineSets (MCM computes them
from its lister the same way), so any process can serve them and they agree across workers. The one
counter, stale machines removed (Failed by the health check, then deleted by their set), lives in
Redis and is raised by whichever worker deleted the machine (``metrics_io.py`` keeps it and serves
the scrape). Names and labels follow MCM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from prometheus_client.core import GaugeMetricFamily, Metric

from mcm_tasks.api import MachineSet
from mcm_tasks.controllers.common.metrics import CONDITION_VALUE, FAILED_MACHINE_LABELS

#: (metric name after ``mcm_machine_set_``, what it counts, how to read it)
_GAUGES: Final[tuple[tuple[str, str, Callable[[MachineSet], float]], ...]] = (
    ("info_spec_replicas", "desired replicas", lambda s: s.spec.replicas),
    ("info_spec_min_ready_seconds", "minReadySeconds", lambda s: s.spec.min_ready_seconds),
    ("status_available_replicas", "available replicas", lambda s: s.status.available_replicas),
    ("status_fully_labelled_replicas", "fully labelled replicas", lambda s: s.status.fully_labeled_replicas),
    ("status_ready_replicas", "ready replicas", lambda s: s.status.ready_replicas),
    ("status_replicas", "replicas", lambda s: s.status.replicas),
)


def machine_set_metrics(machine_sets: Iterable[MachineSet]) -> list[Metric]:
    """The gauges for a list of sets (pure, so the table tests read them without Prometheus)."""
    sets = list(machine_sets)
    items = GaugeMetricFamily(
        "mcm_machine_set_items_total", "Count of machinesets currently managed by the mcm."
    )
    items.add_metric([], len(sets))
    ident = ["name", "namespace"]
    info = GaugeMetricFamily(
        "mcm_machine_set_info",
        "Information of the Machinesets currently managed by the mcm.",
        labels=[*ident, "createdAt", "spec_machine_class_api_group", "spec_machine_class_kind",
                "spec_machine_class_name"],
    )  # fmt: skip
    gauges = [
        (GaugeMetricFamily(f"mcm_machine_set_{name}", f"Machinesets' {text}.", labels=ident), value)
        for name, text, value in _GAUGES
    ]
    conditions = GaugeMetricFamily(
        "mcm_machine_set_status_condition",
        "Information of the mcm managed Machinesets' status conditions.",
        labels=[*ident, "condition"],
    )
    failed = GaugeMetricFamily(
        "mcm_machine_set_failed_machines",
        "Information of the mcm managed Machinesets' failed machines.",
        labels=list(FAILED_MACHINE_LABELS),
    )
    for ms in sets:
        meta = ms.metadata
        labels = [meta.name or "", meta.namespace or ""]
        created = str(int(meta.creation_timestamp.timestamp())) if meta.creation_timestamp else ""
        klass = ms.spec.machine_class
        info.add_metric([*labels, created, klass.api_group, klass.kind, klass.name], 1)
        for family, value in gauges:
            family.add_metric(labels, value(ms))
        for cond in ms.status.conditions:
            conditions.add_metric([*labels, str(cond.type)], CONDITION_VALUE.get(str(cond.status), 0.0))
        for summary in ms.status.failed_machines:
            op = summary.last_operation
            failed.add_metric(
                [*labels, summary.name, summary.provider_id, str(op.state), str(op.type), summary.owner_ref],
                1,
            )
    return [items, info, *(family for family, _ in gauges), conditions, failed]
