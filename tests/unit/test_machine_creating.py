"""A Machine's ``Creating`` condition (``controllers/common/creating.py``): its reason per creation
step, its transition time kept while the reason holds, a slightly different error not rewritten
(MCM's de-duplication), and its removal once the machine runs or is deleted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_tasks.api import Machine, MachineStatus
from mcm_tasks.controllers.common.creating import with_creating_condition

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(seconds=40)


def machine(phase: str = "", provider_id: str = "", deleting: bool = False, description: str = "",
            conditions: list[dict[str, Any]] | None = None) -> Machine:  # fmt: skip
    meta: dict[str, Any] = {"name": "m", "namespace": "ns"}
    if deleting:
        meta["deletionTimestamp"] = T0.isoformat()
    return Machine.model_validate({
        "metadata": meta, "spec": {"providerID": provider_id},
        "status": {"currentStatus": {"phase": phase}, "lastOperation": {"description": description},
                   "conditions": conditions or []},
    })  # fmt: skip


def creating(status: MachineStatus) -> Any:
    return next((c for c in status.conditions if c.type == "Creating"), None)


@pytest.mark.parametrize(
    ("m", "reason"),
    [
        (machine(description="Creating machine on cloud provider"), "CreatingVM"),
        (machine("Pending", provider_id="local:///m", description="Created"), "WaitingForNode"),
        (
            machine("CrashLoopBackOff", description="Cloud provider message - quota"),
            "WaitingForCreationTimeout",
        ),
        (machine("Running", provider_id="p"), None),
        (machine("Pending", deleting=True), None),
    ],
)
def test_the_reason_follows_the_creation_step(m: Machine, reason: str | None) -> None:
    found = creating(with_creating_condition(m, m.status, T0))
    assert (found.reason if found else None) == reason
    if found is not None:
        assert found.status == "True" and found.message == m.status.last_operation.description


def test_the_transition_time_holds_and_a_similar_error_is_not_rewritten() -> None:
    first = machine(
        "CrashLoopBackOff", description="Cloud provider message - quota exceeded, request id 1234"
    )
    status = with_creating_condition(first, first.status, T0)
    again = first.model_copy(update={"status": status})
    similar = status.model_copy(update={"last_operation": status.last_operation.model_copy(
        update={"description": "Cloud provider message - quota exceeded, request id 9876"})})  # fmt: skip
    assert with_creating_condition(again, similar, LATER).conditions == status.conditions
    running = status.model_copy(update={"current_status": status.current_status.model_copy(
        update={"phase": "Running"})})  # fmt: skip
    assert creating(with_creating_condition(again, running, LATER)) is None


def test_a_new_reason_moves_the_transition_time() -> None:
    m = machine(description="Creating")
    status = with_creating_condition(m, m.status, T0)
    joined = m.model_copy(update={"spec": m.spec.model_copy(update={"provider_id": "p"}), "status": status})
    found = creating(with_creating_condition(joined, joined.status, LATER))
    assert found.reason == "WaitingForNode" and found.last_transition_time == LATER
