"""What the machine controller watches, declared beside it: which updates of a Machine wake its own
reconcile. The informer's routing asks this; everything else a machine's update wakes (its set, its
class, the safety jobs) is declared by those controllers.

Status-only updates, mostly the echoes of the controller's own writes, wake nothing: upstream does
not reconcile on them either, and its requeue periods drive progress.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcm_tasks.api.constants import PRESERVE_ANNOTATION

Obj = Mapping[str, Any]


def _meta(obj: Obj | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def wakes_machine(old: Obj | None, new: Obj | None) -> bool:
    """An update of a Machine that its own reconcile must see: the spec changed (generation), the
    preserve annotation changed, or a deletion started."""
    before, after = _meta(old), _meta(new)
    return (
        before.get("generation") != after.get("generation")
        or (before.get("annotations") or {}).get(PRESERVE_ANNOTATION)
        != (after.get("annotations") or {}).get(PRESERVE_ANNOTATION)
        or bool(before.get("deletionTimestamp")) != bool(after.get("deletionTimestamp"))
    )
