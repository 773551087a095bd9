"""Adding and removing a finalizer, decided once for every controller and kind: a finalizer is added at
the end of the list and removed wherever it appears; the writes around it guard on the object's
resourceVersion (upstream ``addMachineFinalizers``, ``deleteMachineFinalizers``,
``addMachineSetFinalizers``, ``addMachineClassFinalizers``, ``addSecretFinalizers`` and their
delete counterparts all do this same edit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def with_finalizer(finalizers: Sequence[str] | None, name: str, present: bool) -> list[str]:
    """The finalizer list with ``name`` present or absent."""
    current = list(finalizers or ())
    if present:
        return current if name in current else [*current, name]
    return [f for f in current if f != name]


def finalizers_patch(
    meta_finalizers: Sequence[str],
    resource_version: str | None,
    *,
    add: str | None = None,
    remove: str | None = None,
) -> dict[str, Any] | None:
    """A resourceVersion-guarded merge patch adding or removing one finalizer; None when nothing
    changes."""
    finalizers = list(meta_finalizers)
    if add is not None:
        finalizers = with_finalizer(finalizers, add, True)
    if remove is not None:
        finalizers = with_finalizer(finalizers, remove, False)
    if finalizers == list(meta_finalizers):
        return None
    return {"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}}
