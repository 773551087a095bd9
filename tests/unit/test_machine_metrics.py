"""The scrape-time state metrics (pure) and the failed-join counter."""

from __future__ import annotations

from collections.abc import Sequence

from mcm_tasks.api import Machine, MachineStatus
from mcm_tasks.controllers.machine import metrics


def machine(name: str, phase: str, conditions: list[dict[str, str]] | None = None) -> Machine:
    return Machine.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"node": f"node-{name}"},
            },
            "spec": {
                "class": {"apiGroup": "machine.sapcloud.io", "kind": "MachineClass", "name": "c1"},
                "providerID": f"local:///z/{name}",
            },
            "status": {"currentStatus": {"phase": phase}, "conditions": conditions or []},
        }
    )


def samples(families: Sequence[object]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in families:
        for s in family.samples:  # type: ignore[attr-defined]
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_state_metrics() -> None:
    got = samples(
        metrics.machine_metrics(
            [
                machine(
                    "a",
                    "Running",
                    [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}],
                ),
                machine("b", "Terminating"),
                machine("c", ""),
            ],
            frozen=True,
        )
    )
    assert got[("mcm_machine_items_total", ())] == 3
    assert got[("mcm_machine_current_status_phase", (("name", "a"), ("namespace", "ns")))] == 1
    assert got[("mcm_machine_current_status_phase", (("name", "b"), ("namespace", "ns")))] == -4
    assert ("mcm_machine_current_status_phase", (("name", "c"), ("namespace", "ns"))) not in got
    ready = ("mcm_machine_status_condition", (("condition", "Ready"), ("name", "a"), ("namespace", "ns")))
    disk = (
        "mcm_machine_status_condition",
        (("condition", "DiskPressure"), ("name", "a"), ("namespace", "ns")),
    )
    assert got[ready] == 1 and got[disk] == 0
    assert got[("mcm_machine_controller_frozen", ())] == 1
    info = [dict(labels) for name, labels in got if name == "mcm_machine_info"]
    assert len(info) == 3
    [a] = [labels for labels in info if labels["name"] == "a"]
    assert a["spec_provider_id"] == "local:///z/a" and a["spec_class_name"] == "c1"
    assert a["createdAt"] == "1767225600"
    # upstream updateMachineInfoMetric's class group and node name
    assert a["spec_class_api_group"] == "machine.sapcloud.io" and a["node_name"] == "node-a"


def test_failed_join_counts_pending_to_failed_only() -> None:
    before = metrics.FAILED_JOINS._value.get()  # type: ignore[attr-defined]
    pending = MachineStatus.model_validate({"currentStatus": {"phase": "Pending"}})
    failed = MachineStatus.model_validate({"currentStatus": {"phase": "Failed"}})
    unknown = MachineStatus.model_validate({"currentStatus": {"phase": "Unknown"}})
    metrics.observe_status_write(pending, failed)
    metrics.observe_status_write(unknown, failed)
    assert metrics.FAILED_JOINS._value.get() == before + 1  # type: ignore[attr-defined]
