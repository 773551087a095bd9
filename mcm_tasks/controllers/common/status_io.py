"""Machine status, written: every status write of the machine controller goes through
``update_machine_status`` (with the pass's scope: its client and clock), and each written status
tells people through its Events. What to write, whether it is worth writing and which Events it
makes are decided in ``status.py``.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineOperationType, MachinePhase, MachineState, MachineStatus
from mcm_tasks.controllers.common import events
from mcm_tasks.controllers.common.creating import with_creating_condition
from mcm_tasks.controllers.common.lagging_io import wake
from mcm_tasks.controllers.common.metrics import observe_status_write
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.controllers.common.status import (
    CONFIGURATION_ERROR_CODE,
    current_status,
    is_status_similar,
    last_operation,
    machine_ref,
    node_ref,
    owner_set_items,
    status_events,
    updated_status,
)
from mcm_tasks.kube import ops
from mcm_tasks.kube.events import EventRecorder, EventType

log = logging.getLogger(__name__)


def recorder(api: ApiClient) -> EventRecorder:
    """The machine controller's recorder on the control cluster ``api``."""
    return events.recorder(api, events.MACHINE_COMPONENT)


def record_event(api: ApiClient, machine: Machine, type_: EventType, reason: str, message: str) -> None:
    """Best effort, as Kubernetes events are: never raises. A status change is the action; the
    machine's Node is the related object (events.k8s.io/v1)."""
    recorder(api).event(machine_ref(machine), type_, reason, message, action="UpdateStatus",
                     related=node_ref(machine))  # fmt: skip


def update_machine_status(
    scope: PassScope[Any], machine: Machine, status: MachineStatus, *, dedup: bool = True
) -> Machine | None:
    """Write ``status`` over the machine's (PUT to the status subresource with its resourceVersion).

    Returns the machine as written, or None when de-duplication skipped the write. A Conflict or any
    other API error propagates.
    Upstream: ``updateMachineStatus``.
    """
    now = scope.clock()
    status = with_creating_condition(machine, status, now)
    if dedup and is_status_similar(status, machine.status, now):
        log.debug("machine %s: status similar to the current one, not written", machine.key)
        return None
    body = machine.status_body(status)
    written = Machine.model_validate(ops.update_status(scope.api, kinds.MACHINE.resource, body))
    observe_status_write(machine.status, status)
    if status.current_status.phase != machine.status.current_status.phase:
        wake(
            scope.settings, owner_set_items(written)
        )  # while the mirror lags: its set counts the new phase at once
    for spec in status_events(machine.status, status):
        record_event(scope.api, written, spec.type, spec.reason, spec.message)
    log.info(
        "machine %s: phase %s, %s/%s: %s",
        machine.key,
        status.current_status.phase or "<none>",
        status.last_operation.type,
        status.last_operation.state,
        status.last_operation.description,
    )
    return written


def write_operation(
    scope: PassScope[Any],
    machine: Machine,
    description: str,
    state: MachineState | str,
    type_: MachineOperationType | str,
    *,
    phase: MachinePhase | str | None = None,
    timeout_active: bool = False,
    error_code: str = "",
    last_known_state: str | None = None,
) -> Machine | None:
    """MCM's ``machineStatusUpdate``: a new lastOperation and (when ``phase`` is given) a new
    currentStatus, de-duplicated. The common case of every flow."""
    now = scope.clock()
    status = updated_status(
        machine,
        last_op=last_operation(description, state, type_, error_code=error_code, now=now),
        current=None if phase is None else current_status(phase, timeout_active=timeout_active, now=now),
        last_known_state=last_known_state,
    )
    return update_machine_status(scope, machine, status)


def write_problem(scope: PassScope[Any], machine: Machine, description: str) -> Machine | None:
    """Report bad input (invalid machine, missing class or secret or userData, invalid class, unknown
    provider) on the machine: lastOperation Failed with the operation it was in (Create when none),
    errorCode ``ConfigurationError``, phase unchanged.

    Upstream: ``updateMachineToFailedState``.
    """
    type_ = machine.status.last_operation.type or MachineOperationType.CREATE
    return write_operation(
        scope, machine, description, MachineState.FAILED, type_, error_code=CONFIGURATION_ERROR_CODE
    )
