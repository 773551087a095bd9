"""Metric vocabulary more than one controller uses: the failed-join gauge every Machine status write
feeds, and the label sets and condition encoding the MachineSet and MachineDeployment series share."""

from __future__ import annotations

from typing import Final

from prometheus_client import Gauge

from mcm_tasks.api import ConditionStatus, MachinePhase, MachineStatus

#: a gauge that only goes up, so the series keeps MCM's exact name (a Counter would add ``_total``);
#: in a worker's pool processes (multiprocess mode) their values are summed, with no ``pid`` label
FAILED_JOINS = Gauge(
    "mcm_machine_num_failed_join",
    "Machines that did not join within the creation timeout (since start).",
    multiprocess_mode="sum",
)

#: condition status → gauge value, as MCM maps them
CONDITION_VALUE: Final[dict[str, float]] = {
    ConditionStatus.TRUE: 1.0,
    ConditionStatus.FALSE: 0.0,
    ConditionStatus.UNKNOWN: 2.0,
}
FAILED_MACHINE_LABELS: Final = (
    "name",
    "namespace",
    "failed_machine_name",
    "failed_machine_provider_id",
    "failed_machine_last_operation_state",
    "failed_machine_last_operation_machine_operation_type",
    "failed_machine_owner_ref",
)


def observe_status_write(old: MachineStatus, new: MachineStatus) -> None:
    if old.current_status.phase == MachinePhase.PENDING and new.current_status.phase == MachinePhase.FAILED:
        FAILED_JOINS.inc()
