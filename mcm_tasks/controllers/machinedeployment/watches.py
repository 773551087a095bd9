"""What the MachineDeployment controller watches, declared beside it; the informer's routing asks this.

A deployment is woken by every event of itself and of the MachineSets it controls (or that it may
adopt), as upstream's ``addMachineSetToDeployment``/``updateMachineSetToDeployment``/
``deleteMachineSetToDeployment``; routing resolves those owners. Beyond that it watches machines in
one case: a Recreate rollout waits until no old machine is left (``recreate``), so the deletion of
its last machine wakes it (upstream ``deleteMachineToMachineDeployment``). Its own updates wake it
unless only its status changed (``wakes_machine_deployment``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcm_tasks.api.meta import beyond_status

RECREATE = "Recreate"


def waits_for_machines_gone(deployment: Mapping[str, Any] | None) -> bool:
    """Whether the deletion of the last machine under this deployment must wake it: its strategy is
    Recreate, whose new set is scaled up only once the old machines are all gone."""
    strategy = ((deployment or {}).get("spec") or {}).get("strategy") or {}
    return isinstance(strategy, Mapping) and strategy.get("type") == RECREATE


def wakes_machine_deployment(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """An update of a MachineDeployment that its own reconcile must see: anything but its status
    changed (spec and scale, labels, annotations such as the autoscaler's trigger-deletion, finalizers,
    a deletion).

    Deliberate difference: MCM reconciles a deployment on every update (``addMachineDeployment``,
    ``updateMachineDeployment`` enqueue it), the echoes of its own status writes included. A pass computes
    the status from the sets and writes it once at the end; the echo's pass found the same figures and
    wrote nothing, so at scale every set status write cost two deployment passes instead of one. What
    moves a rollout on (its sets' updates, its requeue after ShortRetry or at the progress deadline) is
    unchanged.
    """
    return beyond_status(old) != beyond_status(new)
