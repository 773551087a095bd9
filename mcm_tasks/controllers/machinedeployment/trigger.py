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

from mcm_tasks.api import MachinePhase, Obj
from mcm_tasks.api.constants import (
    MACHINE_PRIORITY_ANNOTATION,
    MACHINE_PRIORITY_TRIGGERED,
    MARKED_FOR_DELETION_TIME_ANNOTATION,
)

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
