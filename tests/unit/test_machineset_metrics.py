"""The ``mcm_machine_set_*`` gauges as computed from MachineSets (``machineset.metrics``)."""

from __future__ import annotations

from prometheus_client.core import Metric

from mcm_tasks.api import MachineSet
from mcm_tasks.controllers.machineset.metrics import machine_set_metrics


def by_name(metrics: list[Metric]) -> dict[str, Metric]:
    return {m.name: m for m in metrics}


def sample_values(metric: Metric) -> list[tuple[dict[str, str], float]]:
    return [(dict(s.labels), s.value) for s in metric.samples]


def test_machine_set_gauges() -> None:
    ms = MachineSet.model_validate(
        {
            "metadata": {"name": "ms", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "replicas": 4, "minReadySeconds": 7, "machineClass": {"kind": "MachineClass", "name": "c"}
            },
            "status": {
                "replicas": 3, "fullyLabeledReplicas": 3, "readyReplicas": 2, "availableReplicas": 2,
                "machineSetCondition": [
                    {"type": "ReplicaFailure", "status": "True"},
                    {"type": "Frozen", "status": "Unknown"},
                ],
                "failedMachines": [
                    {"name": "f", "providerID": "p", "ownerRef": "ms",
                     "lastOperation": {"state": "Failed", "type": "HealthCheck"}}
                ],
            },
        }
    )  # fmt: skip
    metrics = by_name(machine_set_metrics([ms, MachineSet.model_validate({"metadata": {"name": "b"}})]))
    ident = {"name": "ms", "namespace": "ns"}
    assert sample_values(metrics["mcm_machine_set_items_total"]) == [({}, 2.0)]
    assert sample_values(metrics["mcm_machine_set_info_spec_replicas"])[0] == (ident, 4.0)
    assert sample_values(metrics["mcm_machine_set_info_spec_min_ready_seconds"])[0] == (ident, 7.0)
    assert sample_values(metrics["mcm_machine_set_status_replicas"])[0] == (ident, 3.0)
    assert sample_values(metrics["mcm_machine_set_status_fully_labelled_replicas"])[0] == (ident, 3.0)
    assert sample_values(metrics["mcm_machine_set_status_ready_replicas"])[0] == (ident, 2.0)
    assert sample_values(metrics["mcm_machine_set_status_available_replicas"])[0] == (ident, 2.0)
    assert sample_values(metrics["mcm_machine_set_status_condition"]) == [
        ({**ident, "condition": "ReplicaFailure"}, 1.0),
        ({**ident, "condition": "Frozen"}, 2.0),
    ]
    info = sample_values(metrics["mcm_machine_set_info"])[0]
    assert info == (
        {**ident, "createdAt": "1767225600", "spec_machine_class_api_group": "",
         "spec_machine_class_kind": "MachineClass", "spec_machine_class_name": "c"},
        1.0,
    )  # fmt: skip
    assert sample_values(metrics["mcm_machine_set_failed_machines"]) == [
        (
            {**ident, "failed_machine_name": "f", "failed_machine_provider_id": "p",
             "failed_machine_last_operation_state": "Failed",
             "failed_machine_last_operation_machine_operation_type": "HealthCheck",
             "failed_machine_owner_ref": "ms"},
            1.0,
        )
    ]  # fmt: skip
