"""What holds a drain, in words (pure): the pods whose eviction is refused, and the PodDisruptionBudget
that refuses each, from the drain's progress (``state_io``) and the target cluster's pods and budgets.

MCM says only "Drain the node" while it retries; the operator then reads the controller's log to
learn which pod and which budget. ``admin why`` (and the ``Deleting`` condition's message while the
reason is ``DrainingNode``) names them instead: "pod default/web-0: eviction refused 3 times by
PodDisruptionBudget default/web (0 disruptions allowed)".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from mcm_tasks.api import ObjView
from mcm_tasks.controllers.machine.drain.pods import pdb_for_pod
from mcm_tasks.controllers.machine.drain.state_io import DrainProgress

#: at most this many pods are named; more are counted
NAMED: Final = 5


@dataclass(frozen=True)
class Blocker:
    pod: str
    #: evictions refused so far
    refused: int
    #: ``namespace/name`` of the budget that selects the pod, "" when none does (another refusal)
    pdb: str = ""
    #: the budget's disruptionsAllowed, when known
    allowed: int | None = None
    #: waiting for an evicted pod to terminate or its volumes to detach, not for an eviction
    terminating: bool = False


def blockers(progress: DrainProgress, pods: Mapping[str, ObjView], pdbs: Iterable[ObjView]) -> list[Blocker]:
    """The pods the drain waits for, refused ones first (then by refusals, then by name). ``pods``:
    the pod objects by ``namespace/name`` (those still there)."""
    budgets = list(pdbs)
    out = []
    for key, p in progress.pods.items():
        if p.resolved:
            continue
        if p.removed_at is not None:
            out.append(Blocker(key, p.attempts, terminating=True))
            continue
        if p.attempts <= 0:
            continue
        pod = pods.get(key)
        pdb = pdb_for_pod(budgets, pod) if pod is not None else None
        if pdb is None:
            out.append(Blocker(key, p.attempts))
            continue
        meta = pdb.get("metadata") or {}
        allowed = (pdb.get("status") or {}).get("disruptionsAllowed")
        out.append(Blocker(key, p.attempts, f"{meta.get('namespace')}/{meta.get('name')}",
                           None if allowed is None else int(allowed)))  # fmt: skip
    return sorted(out, key=lambda b: (b.terminating, -b.refused, b.pod))


def describe(b: Blocker, counted: bool = True) -> str:
    """One blocker in words; ``counted=False`` leaves the refusals out (a condition's message, which
    must not change with every retry)."""
    if b.terminating:
        return f"pod {b.pod}: evicted, waiting for it to terminate (and its volumes to detach)"
    times = (" once" if b.refused == 1 else f" {b.refused} times") if counted else ""
    if not b.pdb:
        return f"pod {b.pod}: eviction refused{times}"
    allowed = "" if b.allowed is None else f" ({b.allowed} disruptions allowed)"
    return f"pod {b.pod}: eviction refused{times} by PodDisruptionBudget {b.pdb}{allowed}"


def blockers_message(found: list[Blocker], limit: int = NAMED, *, counted: bool = True) -> str:
    """The blockers in one line: "2 pods hold the drain: …; …", the first ``limit`` named."""
    if not found:
        return ""
    noun = "pod holds" if len(found) == 1 else "pods hold"
    text = f"{len(found)} {noun} the drain: " + "; ".join(describe(b, counted) for b in found[:limit])
    more = len(found) - limit
    return text + (f"; {more} more" if more > 0 else "")
