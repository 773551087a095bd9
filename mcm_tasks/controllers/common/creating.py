"""A Machine's ``Creating`` condition (pure), derived from the status about to be written.

MCM tells a machine's creation in one line (``lastOperation.description``) and a phase; this says the
same as a condition, next to the Node conditions MCM copies into ``status.conditions``, so tools that
read conditions (``kubectl wait``, kstatus, ``mcm-tasks admin why``) see where a creation stands:

- ``CreatingVM``: no VM yet (no providerID): the driver's CreateMachine has not succeeded;
- ``WaitingForNode``: the VM exists; its Node has not registered, or is not Ready yet;
- ``WaitingForCreationTimeout``: creation failed (``CrashLoopBackOff``); it is retried until the
  machine's creation timeout, after which the machine is marked Failed and replaced.

The condition is True while the machine is created and absent afterwards (Running, Failed, or being
deleted: its ``Deleting`` condition takes over). Its message is the lastOperation's description; its
transition time moves only with the reason, so it says since when the machine waits there. A status
whose description changed only slightly (the same cloud error with another request ID, MCM's
similarity rule) keeps the condition as it was, so the write de-duplication still holds.
"""

from __future__ import annotations

import difflib
from datetime import datetime
from typing import Final

from mcm_tasks.api import Machine, MachinePhase, MachineStatus, NodeCondition

MACHINE_CREATING_CONDITION: Final = "Creating"
CREATING_VM: Final = "CreatingVM"
WAITING_FOR_NODE: Final = "WaitingForNode"
WAITING_FOR_CREATION_TIMEOUT: Final = "WaitingForCreationTimeout"
#: MCM's StringSimilarityRatio threshold, as the status de-duplication uses it
_SIMILAR: Final = 0.75


def creating_reason(machine: Machine, status: MachineStatus) -> str | None:
    """The ``Creating`` reason for a machine about to have ``status``; None when it is not created."""
    if machine.metadata.is_deleting:
        return None
    phase = status.current_status.phase
    if phase == MachinePhase.CRASH_LOOP_BACK_OFF:
        return WAITING_FOR_CREATION_TIMEOUT
    if phase not in ("", MachinePhase.PENDING):
        return None
    if machine.spec.provider_id or machine.metadata.labels.get("node"):
        return WAITING_FOR_NODE
    return CREATING_VM


def with_creating_condition(machine: Machine, status: MachineStatus, now: datetime) -> MachineStatus:
    """``status`` with the machine's ``Creating`` condition set, kept, or removed."""
    reason = creating_reason(machine, status)
    old = next((c for c in status.conditions if c.type == MACHINE_CREATING_CONDITION), None)
    rest = [c for c in status.conditions if c.type != MACHINE_CREATING_CONDITION]
    if reason is None:
        return status if old is None else status.model_copy(update={"conditions": rest})
    message = status.last_operation.description
    if reason == WAITING_FOR_NODE and not message:
        message = "the VM runs; waiting for its Node to register and become Ready"
    if (
        old is not None
        and (old.reason, old.status) == (reason, "True")
        and (
            old.message == message or difflib.SequenceMatcher(None, old.message, message).ratio() >= _SIMILAR
        )
    ):
        return status
    since = old.last_transition_time if old is not None and old.reason == reason else now
    condition = NodeCondition(type=MACHINE_CREATING_CONDITION, status="True", reason=reason, message=message,
                              last_transition_time=since, last_heartbeat_time=now)  # fmt: skip
    return status.model_copy(update={"conditions": [*rest, condition]})
