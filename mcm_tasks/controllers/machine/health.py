"""The health check (upstream ``reconcileMachineHealth``, ``isHealthy``) as pure decisions: from a machine,
its node and the clock to the status it should have, without any I/O. ``health_io`` carries them out.

The matrix:

- node missing, machine Running with conditions → Unknown ("Node object went missing");
- node present: its conditions are copied when any status differs (or the ``InPlaceUpdate``
  condition's reason); then
  healthy and not Running (and not Pending with the critical-components taint) → Running
  ("successfully joined" after a create, else "successfully re-joined");
  unhealthy and Running → Unknown;
- when nothing changed: Pending past the creation timeout (from creationTimestamp, not from the last
  status update: MCM #1009) → Failed; Unknown past the health timeout (from
  currentStatus.lastUpdateTime) → Failed through the permit giver, unless ``disableHealthTimeout``;
  otherwise look again after ``health_recheck_period``, or at the deadline if it comes first (so
  Failed is not up to a period late: MCM #790).

Healthy means: conditions present, Ready is True, and every condition in the effective node-condition
list is False (Unknown counts as unhealthy).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from mcm_tasks.api import (
    CurrentStatus,
    Machine,
    MachineOperationType,
    MachinePhase,
    MachineState,
    MachineStatus,
    NodeCondition,
)
from mcm_tasks.api.constants import (
    CRITICAL_COMPONENTS_NOT_READY_TAINT,
    EFFECTIVE_CREATION_TIMEOUT_ANNOTATION,
    NODE_IN_PLACE_UPDATE_CONDITION,
    TAINT_EFFECT_NO_SCHEDULE,
)
from mcm_tasks.controllers.common.remediation import SETTLED_PHASES as SETTLED_PHASES
from mcm_tasks.controllers.common.remediation import can_mark_machine_failed
from mcm_tasks.controllers.common.remediation import replacements_in_flight as replacements_in_flight
from mcm_tasks.controllers.common.status import current_status, last_operation
from mcm_tasks.durations import format_duration, parse_duration
from mcm_tasks.settings import Settings

NODE_READY: Final = "Ready"


# --- effective configuration -----------------------------------------------------------------------------


def _seconds(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        return None


def creation_timeout(machine: Machine, settings: Settings) -> float:
    """Upstream ``getEffectiveCreationTimeout``: the effective-creation-timeout annotation (the
    deployment's, copied to the machine at its creation), else the machine's, else the flag."""
    for value in (
        machine.metadata.annotations.get(EFFECTIVE_CREATION_TIMEOUT_ANNOTATION),
        machine.spec.creation_timeout,
    ):
        seconds = _seconds(value)
        if seconds is not None:
            return seconds
    return settings.machine_creation_timeout


def declared_creation_timeout(machine: Machine, settings: Settings) -> float:
    """The creation timeout as declared (the machine's ``spec.creationTimeout``, else the flag),
    the floor of the adaptive one."""
    seconds = _seconds(machine.spec.creation_timeout)
    return settings.machine_creation_timeout if seconds is None else seconds


def health_timeout(machine: Machine, settings: Settings) -> float:
    seconds = _seconds(machine.spec.health_timeout)
    return settings.machine_health_timeout if seconds is None else seconds


def node_condition_types(machine: Machine, settings: Settings) -> list[str]:
    if machine.spec.node_conditions:
        return [c.strip() for c in machine.spec.node_conditions.split(",") if c.strip()]
    return settings.node_condition_list


# --- node reading ----------------------------------------------------------------------------------------


def node_conditions(node: Mapping[str, Any]) -> list[NodeCondition]:
    """Upstream: ``getNodeCondition``, ``NodeConditions``."""
    raw = (node.get("status") or {}).get("conditions") or []
    return [NodeCondition.model_validate(c) for c in raw]


def _condition_key(condition: NodeCondition) -> tuple[str | None, str | None]:
    reason = condition.reason if condition.type == NODE_IN_PLACE_UPDATE_CONDITION else None
    return condition.status, reason


def conditions_changed(old: Sequence[NodeCondition], new: Sequence[NodeCondition]) -> bool:
    """MCM's ``nodeConditionsHaveChanged``: a type added or removed, or a status changed; for the
    ``InPlaceUpdate`` condition a changed reason too (its status stays True from candidate to
    result, the reason is the news)."""
    return {c.type: _condition_key(c) for c in old} != {c.type: _condition_key(c) for c in new}


def has_critical_components_taint(node: Mapping[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints") or []
    return any(
        t.get("key") == CRITICAL_COMPONENTS_NOT_READY_TAINT and t.get("effect") == TAINT_EFFECT_NO_SCHEDULE
        for t in taints
    )


def is_healthy(conditions: Sequence[NodeCondition], condition_types: Iterable[str]) -> bool:
    if not conditions:
        return False
    watched = set(condition_types)
    for c in conditions:
        if c.type == NODE_READY and c.status != "True":
            return False
        if c.type in watched and c.status != "False":
            return False
    return True


# --- the decision ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthDecision:
    #: the status to write; None when nothing changed
    status: MachineStatus | None = None
    #: the machine joined for the first time (delete the bootstrap token, note the join duration)
    joined: bool = False
    #: the health timeout expired: mark Failed with this status, but only through the permit giver
    failed_by_health_timeout: bool = False
    #: come back after this many seconds for a timeout check (None: no timer needed)
    recheck_after: float | None = None


def _minutes(seconds: float) -> str:
    return format_duration(seconds)


def decide_health(
    machine: Machine, node: Mapping[str, Any] | None, now: datetime, settings: Settings
) -> HealthDecision:
    name = machine.metadata.name or ""
    phase = machine.status.current_status.phase
    status = machine.status
    changed = False

    def transition(description: str, state: MachineState, type_: str, new: CurrentStatus) -> None:
        nonlocal status, changed
        status = status.model_copy(
            update={
                "last_operation": last_operation(description, state, type_, now=now),
                "current_status": new,
            }
        )
        changed = True

    joined = False
    if node is None:
        if status.conditions and phase == MachinePhase.RUNNING:
            transition(
                f"Node object went missing. Machine {name} is unhealthy - changing MachinePhase to Unknown",
                MachineState.PROCESSING,
                MachineOperationType.HEALTH_CHECK,
                current_status(MachinePhase.UNKNOWN, now=now),
            )
    else:
        observed = node_conditions(node)
        if conditions_changed(status.conditions, observed):
            status = status.model_copy(update={"conditions": observed})
            changed = True
        healthy = is_healthy(status.conditions, node_condition_types(machine, settings))
        if healthy and phase != MachinePhase.RUNNING:
            if not (phase == MachinePhase.PENDING and has_critical_components_taint(node)):
                op = status.last_operation
                joined = op.type == MachineOperationType.CREATE and op.state != MachineState.SUCCESSFUL
                transition(
                    f"Machine {name} successfully {'joined' if joined else 're-joined'} the cluster",
                    MachineState.SUCCESSFUL,
                    MachineOperationType.CREATE if joined else MachineOperationType.HEALTH_CHECK,
                    current_status(MachinePhase.RUNNING, now=now),
                )
        elif not healthy and phase == MachinePhase.RUNNING:
            summary = ", ".join(f"{c.type}={c.status}" for c in status.conditions) or "none"
            transition(
                f"Machine {name} is unhealthy - changing MachinePhase to Unknown. Node conditions: {summary}",
                MachineState.PROCESSING,
                MachineOperationType.HEALTH_CHECK,
                current_status(MachinePhase.UNKNOWN, now=now),
            )
    if changed:
        return HealthDecision(status=status, joined=joined)
    return _timeouts(machine, now, settings)


def _timeouts(machine: Machine, now: datetime, settings: Settings) -> HealthDecision:
    name = machine.metadata.name or ""
    phase = machine.status.current_status.phase
    if phase == MachinePhase.PENDING:
        timeout = creation_timeout(machine, settings)
        since = machine.metadata.creation_timestamp
        if since is not None and (now - since).total_seconds() > timeout:
            failed = machine.status.model_copy(
                update={
                    "last_operation": last_operation(
                        f"Machine {name} failed to join the cluster in {_minutes(timeout)} minutes.",
                        MachineState.FAILED,
                        machine.status.last_operation.type or MachineOperationType.CREATE,
                        now=now,
                    ),
                    "current_status": current_status(MachinePhase.FAILED, now=now),
                }
            )
            return HealthDecision(status=failed)
        return HealthDecision(recheck_after=_until(since, timeout, now, settings))
    if phase == MachinePhase.UNKNOWN:
        if machine.spec.disable_health_timeout:
            return HealthDecision(recheck_after=settings.health_recheck_period)
        timeout = health_timeout(machine, settings)
        since = machine.status.current_status.last_update_time
        if since is not None and (now - since).total_seconds() > timeout:
            summary = ", ".join(f"{c.type}={c.status}" for c in machine.status.conditions) or "none"
            failed = machine.status.model_copy(
                update={
                    "last_operation": last_operation(
                        f"Machine {name} health checks failing since last {_minutes(timeout)} minutes. "
                        f"Updating machine phase to Failed. Node conditions: {summary}",
                        MachineState.FAILED,
                        machine.status.last_operation.type or MachineOperationType.HEALTH_CHECK,
                        now=now,
                    ),
                    "current_status": current_status(MachinePhase.FAILED, now=now),
                }
            )
            return HealthDecision(status=failed, failed_by_health_timeout=True)
        return HealthDecision(recheck_after=_until(since, timeout, now, settings))
    return HealthDecision()


#: how far past a deadline its recheck is due (the timeouts fire on "more than")
DEADLINE_SLACK: Final = 0.05


def _until(since: datetime | None, timeout: float, now: datetime, settings: Settings) -> float:
    """When to look again at a timer running since ``since``: at its deadline if that comes before
    the recheck period, so a machine is Failed on time rather than up to a period late (MCM #790)."""
    if since is None:
        return settings.health_recheck_period
    remaining = timeout - (now - since).total_seconds()
    return max(0.0, min(settings.health_recheck_period, remaining + DEADLINE_SLACK))


# --- meltdown protection ---------------------------------------------------------------------------------
# upstream's ``canMarkMachineFailed`` and its count live with the other remediation budgets in
# ``controllers/common/remediation.py``; kept importable here under the names the machine controller used.

can_mark_failed = can_mark_machine_failed


def not_marked_description(name: str) -> str:
    return f"Machine {name} couldn't be marked FAILED, other machines are getting replaced"
