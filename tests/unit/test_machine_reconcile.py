"""Reconcile-order decisions (pure): validation messages, which flow runs, requeue choice."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_tasks.api import LastOperation, Machine, MachineClass
from mcm_tasks.controllers.common.finalizers import finalizers_patch
from mcm_tasks.controllers.common.phases import earliest
from mcm_tasks.controllers.machine.nodes import is_managed, wants_machine_deleted
from mcm_tasks.controllers.machine.reconcile import (
    class_problem,
    machine_problem,
    needs_creation,
    needs_health_check,
    resolved_operation,
)
from mcm_tasks.kinds import machine_queue_items
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import configure, reset_settings


def machine(phase: str = "", provider_id: str = "", node: str = "", **spec: Any) -> Machine:
    return Machine.model_validate(
        {
            "metadata": {"name": "m1", "namespace": "default", "labels": {"node": node} if node else {}},
            "spec": {"class": {"kind": "MachineClass", "name": "c1"}, "providerID": provider_id, **spec},
            "status": {"currentStatus": {"phase": phase}},
        }
    )


@pytest.mark.parametrize(
    ("phase", "provider_id", "create"),
    [
        ("", "", True),
        ("", "local:///z/i-1", True),
        ("CrashLoopBackOff", "", True),
        ("CrashLoopBackOff", "local:///z/i-1", True),
        ("Pending", "", True),
        ("Pending", "local:///z/i-1", False),
        ("Running", "local:///z/i-1", False),
        ("Unknown", "local:///z/i-1", False),
        ("Failed", "", False),  # deliberate: Failed machines wait for their owner
        ("Failed", "local:///z/i-1", False),
    ],
)
def test_needs_creation(phase: str, provider_id: str, create: bool) -> None:
    assert needs_creation(machine(phase, provider_id)) is create


@pytest.mark.parametrize(
    ("phase", "node", "check"),
    [
        ("", "", False),
        ("", "m1", False),
        ("Pending", "", False),
        ("Pending", "m1", True),
        ("Failed", "m1", True),
    ],
)
def test_needs_health_check(phase: str, node: str, check: bool) -> None:
    assert needs_health_check(machine(phase, node=node)) is check


def test_machine_problem() -> None:
    assert machine_problem(machine()) is None
    bad = Machine.model_validate(
        {"metadata": {"name": "m1"}, "spec": {"class": {"name": "c1"}, "drainTimeout": "soon"}}
    )
    problem = machine_problem(bad)
    assert problem is not None
    assert problem.startswith("validation of Machine failed: ")
    assert "spec.class.kind" in problem and "drainTimeout" in problem


def test_class_problem() -> None:
    ok = MachineClass.model_validate(
        {
            "metadata": {"name": "c1"},
            "providerSpec": {},
            "nodeTemplate": {
                "capacity": {"cpu": "2", "gpu": "0", "memory": "4Gi"},
                "instanceType": "t",
                "region": "r",
                "zone": "z",
            },
        }
    )
    assert class_problem(ok) is None
    assert (
        class_problem(MachineClass.model_validate({"metadata": {"name": "c1"}, "providerSpec": {}})) is None
    )
    bad = MachineClass.model_validate(
        {
            "metadata": {"name": "c1"},
            "providerSpec": {},
            "nodeTemplate": {"capacity": {"cpu": "2"}, "zone": "z"},
        }
    )
    problem = class_problem(bad)
    assert problem is not None and problem.startswith("MachineClass c1 is invalid: ")
    for field in ("capacity.gpu", "capacity.memory", "instanceType", "region"):
        assert field in problem


def test_earliest_requeue() -> None:
    configure({"long_retry": "10m"})
    try:
        assert earliest([]).after == 600
        assert earliest([None, Requeue(60), Requeue(5), None]).after == 5
        # a hold's note survives a sooner requeue of the same pass
        assert earliest([Requeue(60, "held: ZoneUnhealthy 4/4"), Requeue(5)]) == Requeue(
            5, "held: ZoneUnhealthy 4/4"
        )
    finally:
        reset_settings()


def test_finalizers_patch() -> None:
    assert finalizers_patch(["a"], "3", add="a") is None
    assert finalizers_patch(["a"], "3", add="b") == {
        "metadata": {"resourceVersion": "3", "finalizers": ["a", "b"]}
    }
    assert finalizers_patch(["a", "b"], "3", remove="a") == {
        "metadata": {"resourceVersion": "3", "finalizers": ["b"]}
    }
    assert finalizers_patch([], "3", remove="a") is None


def test_machine_queue_items_route_deleting_machines_to_termination() -> None:
    deleting = machine()
    deleting.metadata.deletion_timestamp = "2026-01-01T00:00:00Z"  # type: ignore[assignment]
    assert machine_queue_items([machine(), deleting]) == [
        ("machine", "default/m1"),
        ("machine-termination", "default/m1"),
    ]


@pytest.mark.parametrize(
    ("node", "managed", "delete"),
    [
        (None, True, True),
        ({"metadata": {}}, True, False),
        ({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, True, True),
        (
            {"metadata": {"annotations": {"node.machine.sapcloud.io/trigger-deletion-by-mcm": "true"}}},
            True,
            True,
        ),
        (
            {"metadata": {"annotations": {"node.machine.sapcloud.io/trigger-deletion-by-mcm": "false"}}},
            True,
            False,
        ),
        ({"metadata": {"annotations": {"node.machine.sapcloud.io/not-managed-by-mcm": "1"}}}, False, False),
    ],
)
def test_node_decisions(node: dict[str, Any] | None, managed: bool, delete: bool) -> None:
    if node is not None:
        assert is_managed(node) is managed
    assert wants_machine_deleted(node) is delete


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        ("", None),
        ("CrashLoopBackOff", None),
        ("Pending", ("Creating machine on cloud provider", "Processing", "Create")),
        ("Running", ("Machine configuration is valid again", "Successful", "HealthCheck")),
        ("Unknown", ("Machine configuration is valid again", "Successful", "HealthCheck")),
        ("Failed", None),
    ],
)
def test_resolved_operation(phase: str, expected: tuple[str, str, str] | None) -> None:
    m = machine(phase)
    assert resolved_operation(m) is None  # no problem reported: nothing to clear
    m.status.last_operation = LastOperation(
        description="x", state="Failed", type="Create", error_code="ConfigurationError"
    )
    got = resolved_operation(m)
    assert (None if got is None else tuple(str(v) for v in got)) == expected
