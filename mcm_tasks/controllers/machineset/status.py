"""MachineSet status: computed from the claimed machines, written (``status_io.py``) only when it changed.

replicas = claimed machines; fullyLabeledReplicas = those carrying every template label;
readyReplicas = Running; availableReplicas = Running or Available; failedMachines = machines whose
lastOperation failed (kept until the set is back to all-ready, as MCM keeps it); the
``ReplicaFailure`` condition (JSON key ``machineSetCondition``) while manageReplicas fails;
observedGeneration = the generation acted on; lastOperation.lastUpdateTime = when the status was
computed, written only with a change of the rest (upstream ``calculateMachineSetStatus``).

``minReadySeconds`` does not delay availability, as in upstream's ``isMachineAvailable`` (the
seeds describe it as the time a machine must be ready before it counts as available, but no
upstream code reads it): Gardener sets 500 on every MachineDeployment, and honouring it would hold
each step of every rollout for over eight minutes longer than MCM does.

Deliberate difference: the condition's reason says which action failed (FailedCreate or
FailedDelete); MCM guesses it from the replica difference and leaves it empty when that is zero.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from mcm_tasks.api import (
    ConditionStatus,
    Machine,
    MachineSet,
    MachineSetCondition,
    MachineSetConditionType,
    MachineSetStatus,
    MachineSummary,
    dump,
    get_condition,
    remove_condition,
    set_condition,
)
from mcm_tasks.controllers.common import preservation
from mcm_tasks.controllers.machineset.facts import Census, census_of, direct

log = logging.getLogger(__name__)

FAILED_CREATE: Final = "FailedCreate"
FAILED_DELETE: Final = "FailedDelete"
#: longest condition message kept (API errors can be long; the message is for humans)
MAX_MESSAGE: Final = 1000


@dataclass(frozen=True)
class ReplicaFailure:
    """Why manageReplicas failed in this pass."""

    reason: str
    message: str


def is_fully_labeled(machine: Machine, template_labels: dict[str, str]) -> bool:
    return template_labels.items() <= machine.metadata.labels.items()


def failed_summary(machine: Machine) -> MachineSummary:
    ref = machine.metadata.controller_ref()
    return MachineSummary(
        name=machine.metadata.name or "",
        provider_id=machine.spec.provider_id,
        last_operation=machine.status.last_operation,
        owner_ref=ref.name if ref is not None else "",
    )


def calculate_status(
    machine_set: MachineSet,
    machines: Sequence[Machine],
    failure: ReplicaFailure | None,
    now: datetime,
    census: Census | None = None,
) -> MachineSetStatus:
    """The status the set should have (MCM's calculateMachineSetStatus); a Running machine is ready
    and available (``isMachineReady``, ``isMachineAvailable``: ``minReadySeconds`` is not waited for).
    ``census``: the machines' census (``facts.census_of``), when the caller has it (taken here
    otherwise)."""
    old = machine_set.status
    found = census if census is not None else census_of(machines, direct(machine_set))
    ready = found.running
    update: dict[str, Any] = {
        "replicas": len(machines),
        "fully_labeled_replicas": found.fully_labeled,
        "ready_replicas": ready,
        "available_replicas": found.available,
        "observed_generation": machine_set.metadata.generation or old.observed_generation,
        # upstream stamps only the time (its other fields are nobody's); written with a change only
        "last_operation": old.last_operation.model_copy(update={"last_update_time": now}),
        # only a Failed machine with a preserve annotation can be a preserved Failed one
        "preserved_failed_replicas": sum(
            preservation.is_preserved_failed(m, now) for m in found.preserved_failed_candidates
        ),
        "auto_preserve_failed_machine_count": found.auto_preserved,
    }
    failed = [failed_summary(m) for m in found.failed_operation]
    if failed:
        update["failed_machines"] = failed
    elif ready == old.replicas:
        update["failed_machines"] = []
    return with_failure(old.model_copy(update=update), failure, now)


def with_failure(status: MachineSetStatus, failure: ReplicaFailure | None, now: datetime) -> MachineSetStatus:
    """The status with the ReplicaFailure condition for ``failure``, or without one for None."""
    conditions = status.conditions
    if failure is not None:
        condition = MachineSetCondition(
            type=MachineSetConditionType.REPLICA_FAILURE,
            status=ConditionStatus.TRUE,
            reason=failure.reason,
            message=failure.message[:MAX_MESSAGE],
            last_transition_time=now,
        )
        return status.model_copy(update={"conditions": set_condition(conditions, condition)})
    if get_condition(conditions, MachineSetConditionType.REPLICA_FAILURE) is not None:
        return status.model_copy(
            update={"conditions": remove_condition(conditions, MachineSetConditionType.REPLICA_FAILURE)}
        )
    return status


def _managed(status: MachineSetStatus) -> tuple[Any, ...]:
    return (
        status.replicas,
        status.fully_labeled_replicas,
        status.ready_replicas,
        status.available_replicas,
        status.observed_generation,
        status.preserved_failed_replicas,
        status.auto_preserve_failed_machine_count or 0,
        [dump(c) for c in status.conditions],
        [dump(f) for f in status.failed_machines],
    )


def status_changed(machine_set: MachineSet, new: MachineSetStatus) -> bool:
    """Whether writing ``new`` would change anything this controller manages."""
    return _managed(machine_set.status) != _managed(new)
