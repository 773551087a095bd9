"""What the MachineDeployment controller watches, declared beside it; the informer's routing asks this.

A deployment is woken by every event of itself and of the MachineSets it controls (or that it may
adopt), as upstream's ``addMachineSetToDeployment``/``updateMachineSetToDeployment``/
``deleteMachineSetToDeployment``; routing resolves those owners. Beyond that it watches machines in
two cases: a Recreate rollout waits until no old machine is left (``recreate``), so the deletion of
its last machine wakes it (upstream ``deleteMachineToMachineDeployment``); an in-place rollout moves
a machine whose update succeeded, so the machine's ``InPlaceUpdate`` condition turning
``UpdateSuccessful`` wakes it (upstream ``updateMachineToMachineDeployment``), and so does the
machine's arrival in the new set, which the new set's replicas must count next
(``in_place_wakes_machine_deployment``). Its own updates wake it unless only its status changed
(``wakes_machine_deployment``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcm_tasks.api.meta import beyond_status

RECREATE = "Recreate"
IN_PLACE_UPDATE = "InPlaceUpdate"
UPDATE_SUCCESSFUL = "UpdateSuccessful"
UPDATE_RESULT_LABEL = "node.machine.sapcloud.io/update-result"


def _in_place_reason(machine: Mapping[str, Any] | None) -> str:
    for condition in ((machine or {}).get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == IN_PLACE_UPDATE:
            return str(condition.get("reason") or "")
    return ""


def _controller(machine: Mapping[str, Any] | None) -> str:
    for ref in ((machine or {}).get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return str(ref.get("uid") or ref.get("name") or "")
    return ""


def in_place_wakes_machine_deployment(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """An update of a machine its deployment acts on at once during an in-place rollout: the
    machine's copy of its Node's ``InPlaceUpdate`` condition turned ``UpdateSuccessful`` (the
    deployment moves it to the new set: upstream ``updateMachineToMachineDeployment``), or the
    machine changed sets carrying the in-transfer mark ``update-result=successful`` (the new set's
    replicas count it next, and neither set creates or deletes machines until then)."""
    if _in_place_reason(new) == UPDATE_SUCCESSFUL and _in_place_reason(old) != UPDATE_SUCCESSFUL:
        return True
    labels = ((new or {}).get("metadata") or {}).get("labels") or {}
    return UPDATE_RESULT_LABEL in labels and _controller(old) != _controller(new)


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
