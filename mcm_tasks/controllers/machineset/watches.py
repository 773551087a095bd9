"""What the MachineSet controller watches, declared beside it: the informer's routing wakes a set on a
change of one of its machines only when the change touches what the set's pass reads, and on a change
of the set itself only when more than its status changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcm_tasks.api.meta import beyond_status


def seen_by_set(machine: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """What a MachineSet's pass reads of one of its machines: claim (labels, owner), propagation
    (spec), manageReplicas (phase, deletion, annotations, preservation, age) and status (phase,
    labels, and the whole lastOperation of a failed one, which goes into ``failedMachines``).

    MCM wakes the set on every machine update. Most of them are the machine controller's own
    progress notes (a new lastOperation description, a heartbeat time): each would run the set's pass,
    which reads every machine, without changing anything.
    An update that leaves this projection alike cannot change the set's decisions or its status, so
    it does not wake the set; everything else does, as upstream.
    """
    m = (machine or {}).get("metadata") or {}
    status = (machine or {}).get("status") or {}
    current = {k: v for k, v in (status.get("currentStatus") or {}).items() if k != "lastUpdateTime"}
    operation = status.get("lastOperation") or {}
    failed = operation.get("state") == "Failed"
    return (
        m.get("labels"),
        m.get("annotations"),
        m.get("ownerReferences"),
        m.get("deletionTimestamp"),
        m.get("generation"),
        (machine or {}).get("spec"),
        current,
        operation if failed else (operation.get("state"), operation.get("type")),
    )


def wakes_machine_set(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """An update of a MachineSet that its own reconcile must see: anything but its status changed
    (spec, labels, annotations, finalizers, owners, a deletion).

    Deliberate difference: MCM reconciles a set on every update (``addMachineSet``, ``updateMachineSet``
    enqueue it), the echoes of its own status writes included. Such an echo changes nothing the pass reads
    but ``status``, which the pass computes afresh from the machines (``calculate_status``); each echo
    would cost a pass over all of them and defeat the batching of machine events (the echo would wake
    the set at once). The one input it takes from the status as written (``failedMachines`` kept
    until the set is back to all-ready) is settled in the pass that writes it (``machine_set_pass``). The
    set's deployment is still woken by every update of it (its status sums the sets' statuses).
    """
    return beyond_status(old) != beyond_status(new)
