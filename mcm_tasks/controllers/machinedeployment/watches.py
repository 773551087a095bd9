"""What the MachineDeployment controller watches, declared beside it; the informer's routing asks this.

A deployment is woken by every event of itself and of the MachineSets it controls (or that it may
adopt), as upstream's ``addMachineSetToDeployment``/``updateMachineSetToDeployment``/
``deleteMachineSetToDeployment``; routing resolves those owners. Beyond that it watches machines in
one case: a Recreate rollout waits until no old machine is left (``recreate``), so the deletion of
its last machine wakes it (upstream ``deleteMachineToMachineDeployment``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RECREATE = "Recreate"


def waits_for_machines_gone(deployment: Mapping[str, Any] | None) -> bool:
    """Whether the deletion of the last machine under this deployment must wake it: its strategy is
    Recreate, whose new set is scaled up only once the old machines are all gone."""
    strategy = ((deployment or {}).get("spec") or {}).get("strategy") or {}
    return isinstance(strategy, Mapping) and strategy.get("type") == RECREATE
