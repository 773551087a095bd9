"""Machine status, decided: building it, whether it is worth writing, and what it tells people.

``status_io.py`` writes it (``update_machine_status``, with the pass's scope: its client and clock)
under three rules decided here:

- **De-duplication** (MCM's ``isMachineStatusSimilar``): a new status that differs from the current one
  only in timestamps, or in a lastOperation description at least 75 % similar (the same cloud error
  with another request ID), is not written, unless the current lastOperation is older than 30 minutes.
  This keeps a machine stuck in a retry loop from writing on every reconcile.
- **Optimistic concurrency**: the write carries the machine's resourceVersion; a Conflict propagates
  (the reconcile shell turns it into a ConflictRetry requeue).
- **Events**: each phase change is a Normal Event (Warning for Failed, CrashLoopBackOff, Unknown), but
  a creation's own steps, its first Pending and its join (``QUIET_TRANSITIONS``), and each newly failed
  operation a Warning Event. Only written statuses produce events, so a repeated error produces
  neither a write nor an event.

Descriptions and event messages carry driver messages (scrubbed by the drivers) and our own text,
never secret material.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from mcm_tasks.api import (
    CurrentStatus,
    LastOperation,
    Machine,
    MachineOperationType,
    MachinePhase,
    MachineState,
    MachineStatus,
    NodeCondition,
)
from mcm_tasks.api.constants import API_VERSION, NODE_LABEL_KEY
from mcm_tasks.kinds import Queue
from mcm_tasks.kube.events import NORMAL, WARNING, EventType, ObjectRef

#: descriptions at least this similar count as the same (MCM's StringSimilarityRatio threshold)
SIMILARITY_THRESHOLD: Final = 0.75
#: a lastOperation older than this is rewritten even when nothing changed
FORCE_REWRITE_AFTER: Final = timedelta(minutes=30)
#: phases whose arrival is bad news
WARNING_PHASES: Final = frozenset(
    {MachinePhase.FAILED, MachinePhase.CRASH_LOOP_BACK_OFF, MachinePhase.UNKNOWN}
)

#: phase changes without an Event of their own, as (old phase, new phase, lastOperation type): the
#: steps of a creation that goes well, a new machine's first Pending (its VM was created) and its join
#: (``Pending → Running`` by the create operation, "successfully joined"). Upstream records no phase
#: Events at all; these two said nothing that the status, the join-duration annotation, the metrics
#: and the set's ``SuccessfulCreate`` do not, and cost one API write per machine each. Every other
#: arrival in Running (a re-join after Unknown, Running again after CrashLoopBackOff or an in-place
#: update) and every failure keeps its Event.
QUIET_TRANSITIONS: Final = frozenset(
    {
        ("", MachinePhase.PENDING.value, MachineOperationType.CREATE.value),
        (MachinePhase.PENDING.value, MachinePhase.RUNNING.value, MachineOperationType.CREATE.value),
    }
)

#: lastOperation.errorCode of problems with the machine's own configuration (not the cloud's)
CONFIGURATION_ERROR_CODE: Final = "ConfigurationError"


# --- building ------------------------------------------------------------------------------------------


def last_operation(
    description: str,
    state: MachineState | str,
    type_: MachineOperationType | str,
    *,
    error_code: str = "",
    now: datetime,
) -> LastOperation:
    return LastOperation(
        description=description,
        state=state,
        type=type_,
        error_code=error_code,
        last_update_time=now,
    )


def current_status(
    phase: MachinePhase | str, *, timeout_active: bool = False, now: datetime
) -> CurrentStatus:
    return CurrentStatus(phase=phase, timeout_active=timeout_active, last_update_time=now)


def updated_status(
    machine: Machine,
    *,
    last_op: LastOperation | None = None,
    current: CurrentStatus | None = None,
    conditions: list[NodeCondition] | None = None,
    last_known_state: str | None = None,
) -> MachineStatus:
    """A copy of the machine's status with the given parts replaced (the rest kept as it is)."""
    update: dict[str, object] = {}
    if last_op is not None:
        update["last_operation"] = last_op
    if current is not None:
        update["current_status"] = current
    if conditions is not None:
        update["conditions"] = conditions
    if last_known_state is not None:
        update["last_known_state"] = last_known_state
    return machine.status.model_copy(update=update)


# --- de-duplication (pure) -----------------------------------------------------------------------------


def description_similarity(a: str, b: str) -> float:
    """0..1, how alike two descriptions are (difflib's ratio; 1.0 for two empty strings)."""
    if a == b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _without_times(op: LastOperation) -> tuple[str, str, str]:
    return (op.error_code, str(op.state), str(op.type))


def _current_without_time(cs: CurrentStatus) -> tuple[str, bool, object]:
    return (str(cs.phase), cs.timeout_active, cs.preserve_expiry_time)


def _conditions_key(conditions: list[NodeCondition]) -> list[tuple[str, str, str, str]]:
    return [(c.type, c.status, c.reason, c.message) for c in conditions]


def is_status_similar(new: MachineStatus, old: MachineStatus, now: datetime) -> bool:
    """Whether writing ``new`` over ``old`` would tell nobody anything (see the module docstring).

    Beyond MCM, the conditions (by type, status, reason, message), the addresses and lastKnownState
    must be equal too, since this one check guards every status write here.
    """
    for op in (new.last_operation, old.last_operation):
        if op.last_update_time is not None and op.last_update_time < now - FORCE_REWRITE_AFTER:
            return False
    if _without_times(new.last_operation) != _without_times(old.last_operation):
        return False
    similar = description_similarity(new.last_operation.description, old.last_operation.description)
    if similar < SIMILARITY_THRESHOLD:
        return False
    if _current_without_time(new.current_status) != _current_without_time(old.current_status):
        return False
    if _conditions_key(new.conditions) != _conditions_key(old.conditions):
        return False
    return new.addresses == old.addresses and new.last_known_state == old.last_known_state


# --- events (pure part) --------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventSpec:
    type: EventType
    reason: str
    message: str


def status_events(old: MachineStatus, new: MachineStatus) -> list[EventSpec]:
    """The Events a written status change deserves: one per phase change, else one per newly failed
    operation (a phase change into a failure already carries the description)."""
    old_phase, new_phase = str(old.current_status.phase), str(new.current_status.phase)
    op = new.last_operation
    if (old_phase, new_phase, str(op.type)) in QUIET_TRANSITIONS:
        return []
    if new_phase != old_phase and new_phase:
        type_: EventType = WARNING if new_phase in WARNING_PHASES else NORMAL
        message = f"phase {old_phase or '<none>'} -> {new_phase}"
        if op.description:
            message += f": {op.description}"
        return [EventSpec(type_, f"Machine{new_phase}", message)]
    if op.state == MachineState.FAILED and (
        old.last_operation.state != MachineState.FAILED
        or old.last_operation.description != op.description
        or old.last_operation.type != op.type
    ):
        reason = (
            "ConfigurationError"
            if op.error_code == CONFIGURATION_ERROR_CODE
            else f"{op.type or 'Reconcile'}Failed"
        )
        return [EventSpec(WARNING, reason, op.description)]
    return []


def machine_ref(machine: Machine) -> ObjectRef:
    meta = machine.metadata
    return ObjectRef(
        api_version=API_VERSION,
        kind="Machine",
        name=meta.name or "",
        namespace=meta.namespace or "",
        uid=meta.uid or "",
    )


def node_ref(machine: Machine) -> ObjectRef | None:
    """The machine's Node (its ``node`` label), as an Event's ``related`` object."""
    node = machine.metadata.labels.get(NODE_LABEL_KEY, "")
    return ObjectRef(api_version="v1", kind="Node", name=node) if node else None


def owner_set_items(machine: Machine) -> list[tuple[Queue, str]]:
    """The machine's MachineSet as a queue item (none for a machine no set controls)."""
    ref = machine.metadata.controller_ref()
    if ref is None or ref.kind != "MachineSet" or not ref.name:
        return []
    return [(Queue.MACHINE_SET, f"{machine.metadata.namespace}/{ref.name}")]


def is_problem(op: LastOperation) -> bool:
    return op.state == MachineState.FAILED and op.error_code == CONFIGURATION_ERROR_CODE
