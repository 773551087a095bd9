"""Conditions that say why (pure), shared by the MachineSet and MachineDeployment controllers.

MCM's own conditions (``Available``, ``Progressing``, ``ReplicaFailure``, ``Frozen``) keep MCM's rule
(``api.set_condition``): an unchanged status and reason leave the condition alone, message included.
The conditions added here name the machines a set or deployment waits for, so their message is kept
current: ``put`` replaces a condition whose status, reason or message changed, and keeps its
transition time while its status holds (Kubernetes' meta/v1 convention, which kstatus and
``kubectl wait`` read).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final, TypeVar

from mcm_tasks.api.meta import Condition

SCALING_UP: Final = "ScalingUp"
NOT_SCALING_UP: Final = "NotScalingUp"
SCALING_DOWN: Final = "ScalingDown"
NOT_SCALING_DOWN: Final = "NotScalingDown"
ROLLING_OUT: Final = "RollingOut"
NOT_ROLLING_OUT: Final = "NotRollingOut"
#: kstatus' abnormal-true conditions: True while the object is not yet what its spec asks (Reconciling)
#: or cannot get there without help (Stalled); absent when settled, so kstatus says Current
RECONCILING: Final = "Reconciling"
STALLED: Final = "Stalled"
#: the conditions this module owns, in the order they are listed
OWNED: Final = (ROLLING_OUT, SCALING_UP, SCALING_DOWN, RECONCILING, STALLED)
#: longest message kept (a condition is for humans; the machine list is cut with a count before)
MAX_MESSAGE: Final = 1000

C = TypeVar("C", bound=Condition)


def put(conditions: Sequence[C], new: C, now: datetime) -> list[C]:
    """``conditions`` with ``new`` in place of its type: unchanged when status, reason and message are
    the same; the transition time kept while the status holds, ``now`` when it flips."""
    new = new.model_copy(update={"message": new.message[:MAX_MESSAGE]})
    current = next((c for c in conditions if c.type == new.type), None)
    if current is not None and (current.status, current.reason, current.message) == (
        new.status,
        new.reason,
        new.message,
    ):
        return list(conditions)
    since = current.last_transition_time if current is not None and current.status == new.status else now
    fields: dict[str, object] = {"last_transition_time": since}
    if "last_update_time" in type(new).model_fields:
        fields["last_update_time"] = now
    new = new.model_copy(update=fields)
    return [c for c in conditions if c.type != new.type] + [new]


def drop(conditions: Sequence[C], type_: str) -> list[C]:
    return [c for c in conditions if c.type != type_]
