"""The cluster-autoscaler's ``node.machine.sapcloud.io/trigger-deletion-by-mcm`` annotation: which
machines to delete when it lowers the deployment's replicas.

The value is ``M1~T1,M2~T2``: machine names with the RFC 3339 time the autoscaler chose them. Each
entry naming a machine of this deployment that is neither Failed nor being deleted gets the machine
``machinepriority.machine.sapcloud.io=1`` and ``machine.sapcloud.io/marked-for-deletion-time=T``
(an existing marked time is kept), so its MachineSet deletes exactly those machines first. Entries
that do not parse, name a missing machine, or one already Failed or deleting are dropped from the
annotation (the autoscaler writes a correct one on its next try); the annotation is removed once
empty. A bare name (the format before the times were added) is read with the deployment's
last-replica-change-by-scaler time, or now. The sets holding marked machines receive that scaler
time too, which the MachineSet compares marked times against.

Deliberate difference: MCM looks the names up among all machines of the namespace; here only the
deployment's own machines count, so a wrong name cannot mark another pool's machine.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from mcm_tasks import kinds
from mcm_tasks.api import MachinePhase, Obj, format_time
from mcm_tasks.api.constants import (
    LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION,
    MACHINE_PRIORITY_ANNOTATION,
    MACHINE_PRIORITY_TRIGGERED,
    MARKED_FOR_DELETION_TIME_ANNOTATION,
    TRIGGER_DELETION_BY_MCM_ANNOTATION,
)
from mcm_tasks.controllers.machinedeployment.control import Context
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import is_not_found

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    machine: str
    #: the time as written (RFC 3339)
    marked: str

    def __str__(self) -> str:
        return f"{self.machine}~{self.marked}"


def parse_rfc3339(value: str) -> datetime | None:
    """Go's time.RFC3339: date, ``T``, time, optional fraction, and ``Z`` or an offset."""
    if "T" not in value.upper():
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def parse_entries(value: str, bare_name_time: str) -> list[Entry]:
    """The valid entries of the annotation, first occurrence of each machine."""
    out: dict[str, Entry] = {}
    for raw in value.split(","):
        text = raw.strip()
        if not text:
            continue
        parts = text.split("~")
        if len(parts) == 1:
            name, marked = parts[0], bare_name_time
        elif len(parts) == 2:
            name, marked = parts
        else:
            continue
        if not name or parse_rfc3339(marked) is None:
            continue
        out.setdefault(name, Entry(name, marked))
    return list(out.values())


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def is_failed_or_deleting(machine: Obj) -> bool:
    phase = ((machine.get("status") or {}).get("currentStatus") or {}).get("phase")
    return bool(_meta(machine).get("deletionTimestamp")) or phase in (
        MachinePhase.FAILED,
        MachinePhase.TERMINATING,
    )


def controller_uid(machine: Obj) -> str | None:
    ref = next((r for r in _meta(machine).get("ownerReferences") or () if r.get("controller")), None)
    return None if ref is None else ref.get("uid")


@dataclass
class TriggerPlan:
    #: the annotation's new value ("" = remove it); None when it stays as it is
    annotation: str | None = None
    #: machine name → annotations to merge onto it
    machine_patches: dict[str, dict[str, str]] = field(default_factory=dict)
    #: the entries kept, with their machines
    kept: list[tuple[Entry, Obj]] = field(default_factory=list)


def plan_trigger(
    current_value: str, entries: Sequence[Entry], machines: Mapping[str, Obj | None], set_uids: set[str]
) -> TriggerPlan:
    """Which entries stay and which machines get marked, given each named machine as read."""
    plan = TriggerPlan()
    for entry in entries:
        machine = machines.get(entry.machine)
        if machine is None or controller_uid(machine) not in set_uids or is_failed_or_deleting(machine):
            continue
        plan.kept.append((entry, machine))
        annotations = _meta(machine).get("annotations") or {}
        wanted: dict[str, str] = {}
        if annotations.get(MACHINE_PRIORITY_ANNOTATION) != MACHINE_PRIORITY_TRIGGERED:
            wanted[MACHINE_PRIORITY_ANNOTATION] = MACHINE_PRIORITY_TRIGGERED
        if not annotations.get(MARKED_FOR_DELETION_TIME_ANNOTATION):
            wanted[MARKED_FOR_DELETION_TIME_ANNOTATION] = entry.marked
        if wanted:
            plan.machine_patches[entry.machine] = wanted
    value = ",".join(str(entry) for entry, _ in plan.kept)
    if value != current_value:
        plan.annotation = value
    return plan


def handle_trigger_deletion(ctx: Context) -> None:
    annotations = ctx.deployment.metadata.annotations
    current_value = annotations.get(TRIGGER_DELETION_BY_MCM_ANNOTATION)
    if current_value is None:
        return
    scaler_time = annotations.get(LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION) or format_time(ctx.now)
    entries = parse_entries(current_value, scaler_time)
    machines = {e.machine: ctx.get_machine(e.machine) for e in entries}
    set_uids = {ms.metadata.uid or "" for ms in ctx.sets}
    plan = plan_trigger(current_value, entries, machines, set_uids)
    if plan.annotation is not None:
        log.info("MachineDeployment %s: trigger-deletion entries now %r (was %r)",
                 ctx.key, plan.annotation, current_value)  # fmt: skip
        ctx.patch_deployment(
            {"metadata": {"annotations": {TRIGGER_DELETION_BY_MCM_ANNOTATION: plan.annotation or None}}}
        )
    for name, wanted in plan.machine_patches.items():
        try:
            ops.patch(
                ctx.api, kinds.MACHINE.resource, name, {"metadata": {"annotations": wanted}}, ctx.namespace
            )
        except Exception as err:
            if not is_not_found(err):
                raise
            continue
        log.info("MachineDeployment %s: machine %s marked for deletion (%s)", ctx.key, name, wanted)
    _copy_scaler_time(ctx, plan)


def _copy_scaler_time(ctx: Context, plan: TriggerPlan) -> None:
    """The sets holding marked machines learn the deployment's last scaler change."""
    scaler_time = ctx.deployment.metadata.annotations.get(LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION)
    if not scaler_time:
        return
    holders = {controller_uid(machine) for _, machine in plan.kept}
    for ms in list(ctx.sets):
        if ms.metadata.uid not in holders:
            continue
        if ms.metadata.annotations.get(LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION) == scaler_time:
            continue
        annotations = {**ms.metadata.annotations, LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION: scaler_time}
        ctx.update_set(
            ms,
            ms.model_copy(update={"metadata": ms.metadata.model_copy(update={"annotations": annotations})}),
        )
