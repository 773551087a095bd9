"""What the safety jobs watch, declared beside them: which Machine events make a job urgent enough
to run before its beat period comes round. The informer's routing asks this.

Upstream registers ``addMachineToSafety``, ``updateMachineToSafety`` and ``deleteMachineToSafety``
on the machine informer: a new machine may overshoot its set, a machine whose description reports
``OutOfRange`` has several VMs behind it (so some are orphans), and a deleted machine may leave its
VM behind.
"""

from __future__ import annotations

from mcm_tasks.api import ObjView
from mcm_tasks.controllers.safety import ORPHAN_VMS, OVERSHOOTING

#: in a machine's lastOperation description: several VMs carry its name (the driver's OutOfRange code)
OUT_OF_RANGE = "OutOfRange"


def _description(machine: ObjView | None) -> str:
    return str((((machine or {}).get("status") or {}).get("lastOperation") or {}).get("description") or "")


def jobs_on_machine_added(new: ObjView | None) -> tuple[str, ...]:
    """Upstream ``addMachineToSafety``: a new machine may take its set over the overshooting limit."""
    return (OVERSHOOTING,)


def jobs_on_machine_updated(old: ObjView | None, new: ObjView | None) -> tuple[str, ...]:
    """Upstream ``updateMachineToSafety``: the sweep runs when a machine's description first reports
    several VMs behind it, not on every update that keeps saying so."""
    if OUT_OF_RANGE in _description(new) and OUT_OF_RANGE not in _description(old):
        return (ORPHAN_VMS,)
    return ()


def jobs_on_machine_deleted(old: ObjView | None) -> tuple[str, ...]:
    """Upstream ``deleteMachineToSafety``: a deleted machine may leave its VM behind."""
    return (ORPHAN_VMS,)
