"""MCM's ``mcm_machine_*`` metrics.

Two kinds, as upstream:

- state metrics (items, phase, info, conditions, frozen) are computed at scrape time from the mirror
  by ``metrics_io.MachineCollector``, so any process with Redis can serve them and they agree across
  workers; register it with ``metrics_io.register_collector``;
- event metrics (create / initialize / join / delete / drain durations, failed joins) are observed by
  the process that saw the event, in the default prometheus_client registry.

The driver-call series ``mcm_cloud_api_driver_*`` are the drivers' own (``providers.metrics``), so a
call is counted once whoever makes it. Label values are names, never secret material.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from mcm_tasks.api import Machine, MachineClass, MachinePhase
from mcm_tasks.api.constants import MACHINE_DEPLOYMENT_NAME_LABEL_KEY, NODE_LABEL_KEY
from mcm_tasks.api.enums import ConditionStatus
from mcm_tasks.controllers.common.metrics import FAILED_JOINS as FAILED_JOINS
from mcm_tasks.controllers.common.metrics import observe_status_write as observe_status_write

#: MCM's numeric encoding of ``mcm_machine_current_status_phase``
PHASE_VALUES: Final[dict[str, float]] = {
    MachinePhase.TERMINATING: -4,
    MachinePhase.FAILED: -3,
    MachinePhase.CRASH_LOOP_BACK_OFF: -2,
    MachinePhase.UNKNOWN: -1,
    MachinePhase.PENDING: 0,
    MachinePhase.RUNNING: 1,
    MachinePhase.AVAILABLE: 1,
}
CONDITION_VALUES: Final[dict[str, float]] = {
    ConditionStatus.TRUE: 1,
    ConditionStatus.FALSE: 0,
    ConditionStatus.UNKNOWN: -1,
}

_DURATION_LABELS = ["namespace", "machine_deployment", "instance_type", "zone"]
_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, float("inf"))

CREATE_DURATION = Histogram(
    "mcm_machine_create_duration_seconds",
    "Duration of the driver's CreateMachine call that launched a machine's VM.",
    _DURATION_LABELS,
    buckets=_BUCKETS,
)
INITIALIZE_DURATION = Histogram(
    "mcm_machine_initialize_duration_seconds",
    "Duration of the driver's InitializeMachine call.",
    _DURATION_LABELS,
    buckets=_BUCKETS,
)
JOIN_DURATION = Histogram(
    "mcm_machine_join_duration_seconds",
    "Time from a machine's creation until it first became Running.",
    _DURATION_LABELS,
    buckets=_BUCKETS,
)
DELETE_DURATION = Histogram(
    "mcm_machine_delete_duration_seconds",
    "Time from a machine's deletion timestamp until its finalizer was removed.",
    _DURATION_LABELS,
    buckets=_BUCKETS,
)
DRAIN_DURATION = Histogram(
    "mcm_machine_drain_duration_seconds",
    "Duration of node drains.",
    _DURATION_LABELS,
    buckets=_BUCKETS,
)
DURATIONS: Final[dict[str, Histogram]] = {
    "create": CREATE_DURATION,
    "initialize": INITIALIZE_DURATION,
    "join": JOIN_DURATION,
    "delete": DELETE_DURATION,
    "drain": DRAIN_DURATION,
}


def duration_labels(machine: Machine, machine_class: MachineClass | None = None) -> list[str]:
    template = machine_class.node_template if machine_class is not None else None
    return [
        machine.metadata.namespace or "",
        machine.metadata.labels.get(MACHINE_DEPLOYMENT_NAME_LABEL_KEY, ""),
        template.instance_type if template is not None else "",
        template.zone if template is not None else "",
    ]


def observe_duration(
    what: str, machine: Machine, seconds: float, machine_class: MachineClass | None = None
) -> None:
    """``what`` is create, initialize, join, delete or drain."""
    DURATIONS[what].labels(*duration_labels(machine, machine_class)).observe(max(seconds, 0.0))


# --- scrape-time state metrics -------------------------------------------------------------------------


def machine_metrics(machines: list[Machine], frozen: bool) -> list[Metric]:
    """The state metrics of a list of machines (pure, for the collector and its tests): upstream's
    ``updateMachineInfoMetric``, ``updateMachineStatusConditionMetric`` and ``updateMachineCSPhaseMetric``."""
    items = GaugeMetricFamily("mcm_machine_items_total", "Count of machines currently managed by the mcm.")
    items.add_metric([], len(machines))
    phase = GaugeMetricFamily(
        "mcm_machine_current_status_phase",
        "Current status phase of the machines (Terminating -4 … Running 1).",
        labels=["name", "namespace"],
    )
    info = GaugeMetricFamily(
        "mcm_machine_info",
        "Information of the machines currently managed by the mcm.",
        # upstream ``updateMachineInfoMetric``'s labels, in its order
        labels=[
            "name",
            "namespace",
            "createdAt",
            "spec_provider_id",
            "spec_class_api_group",
            "spec_class_kind",
            "spec_class_name",
            "node_name",
        ],
    )
    conditions = GaugeMetricFamily(
        "mcm_machine_status_condition",
        "Machine status conditions (True 1, False 0, Unknown -1).",
        labels=["name", "namespace", "condition"],
    )
    for m in machines:
        name, namespace = m.metadata.name or "", m.metadata.namespace or ""
        created = m.metadata.creation_timestamp
        info.add_metric(
            [
                name,
                namespace,
                str(int(created.timestamp())) if created else "",
                m.spec.provider_id,
                m.spec.class_.api_group,
                m.spec.class_.kind,
                m.spec.class_.name,
                m.metadata.labels.get(NODE_LABEL_KEY, ""),
            ],
            1,
        )
        value = PHASE_VALUES.get(str(m.status.current_status.phase))
        if value is not None:
            phase.add_metric([name, namespace], value)
        for c in m.status.conditions:
            conditions.add_metric([name, namespace, c.type], CONDITION_VALUES.get(c.status, -1))
    frozen_gauge = GaugeMetricFamily(
        "mcm_machine_controller_frozen", "Whether the machine controller is frozen (1) or not (0)."
    )
    frozen_gauge.add_metric([], 1 if frozen else 0)
    return [items, phase, info, conditions, frozen_gauge]
