"""A MachineSet's ``ScalingUp`` and ``ScalingDown`` conditions (pure), in MCM's condition list
(``status.machineSetCondition``).

- ``ScalingUp`` True (reason ``ScalingUp``) while fewer machines run than ``spec.replicas``; the
  message counts the machines still to be created and names those on their way with what each waits
  for ("2 machines Pending: ms-x (creating VM, 3 min), ms-y (waiting for Node, under 1 min)"; in
  whole minutes, so the message, and with it the status, changes at most once a minute a machine).
- ``ScalingDown`` True (reason ``ScalingDown``) while the set has more machines than it wants,
  naming the ones being deleted and their deletion step.

Both are present only while True: MCM's list holds what is wrong (``ReplicaFailure``, ``Frozen``)
and is empty on a settled set, and stays so.

A set being deleted says neither (its deletion is what it waits for).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from mcm_tasks.api import ConditionStatus, Machine, MachineSet, MachineSetCondition, MachineSetStatus
from mcm_tasks.controllers.common.conditions import (
    SCALING_DOWN,
    SCALING_UP,
    drop,
    put,
)
from mcm_tasks.controllers.common.holdup import waits_message
from mcm_tasks.controllers.machineset.facts import Census, census_of, direct


def scaling_conditions(
    machine_set: MachineSet,
    status: MachineSetStatus,
    machines: Sequence[Machine],
    now: datetime,
    census: Census | None = None,
) -> MachineSetStatus:
    """``status`` with the set's ScalingUp and ScalingDown for its ``machines`` (the claimed ones).
    ``census``: the machines' census (``facts.census_of``), when the caller has it (taken here
    otherwise): only the machines that do not serve are asked how long they have waited."""
    conditions = list(status.conditions)
    if machine_set.metadata.is_deleting:
        for type_ in (SCALING_UP, SCALING_DOWN):
            conditions = drop(conditions, type_)
        return status.model_copy(update={"conditions": conditions})
    desired = machine_set.spec.replicas
    counted = census if census is not None else census_of(machines, direct(machine_set))
    ready = status.ready_replicas
    if ready < desired:
        parts = [f"Scaling up from {ready} to {desired} running machines"]
        missing = desired - counted.live
        if missing > 0:
            parts.append(f"{missing} to be created")
        waits = waits_message(counted.waiting, now, coarse=True)
        if waits:
            parts.append(waits)
        up = MachineSetCondition(type=SCALING_UP, status=ConditionStatus.TRUE, reason=SCALING_UP,
                                 message="; ".join(parts))  # fmt: skip
    else:
        up = None
    if len(machines) > desired:
        parts = [f"Scaling down from {len(machines)} to {desired} machines"]
        waits = waits_message(counted.deleting_waits, now, coarse=True)
        if waits:
            parts.append(waits)
        down = MachineSetCondition(type=SCALING_DOWN, status=ConditionStatus.TRUE, reason=SCALING_DOWN,
                                   message="; ".join(parts))  # fmt: skip
    else:
        down = None
    for type_, found in ((SCALING_UP, up), (SCALING_DOWN, down)):
        conditions = drop(conditions, type_) if found is None else put(conditions, found, now)
    return status.model_copy(update={"conditions": conditions})
