"""What the controllers do when the queue reports on a key rather than reconciling it:

- a failing reconcile (first failure of a streak, a change of error, a quarantine) puts a Warning
  Event on the key's object, so ``kubectl describe`` names the failure, as MCM's controllers do
  with their own errors; the message is the queue's redacted one, and the recorder folds repeats.
  An Event that could not be written (the API server refusing every write) is written later in
  the streak, at the latest when the key recovers.

A MachineSet whose pass died mid-creation needs no recovery hook: the set's next pass, whichever
message runs it, finds the dead pass's expectations still open and ends them on evidence: a live
list of its machines (``expectations.state_for_pass``).

Imported with the reconcilers (controllers/reconcilers.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mcm_tasks.cache import layout
from mcm_tasks.cache.reader import get_reader
from mcm_tasks.controllers.common.context_io import control_api
from mcm_tasks.controllers.common.events import recorder
from mcm_tasks.kinds import OF_QUEUE
from mcm_tasks.kube import resources as kres
from mcm_tasks.kube.events import WARNING, ObjectRef
from mcm_tasks.queue import registry
from mcm_tasks.settings import get_settings

log = logging.getLogger(__name__)

#: queue kind → (mirror kind, API resource) of the MCM object a key names
OBJECTS: dict[str, tuple[str, kres.Resource]] = {
    queue: (kind.mirror, kind.resource) for queue, kind in OF_QUEUE.items() if kind.model is not None
}


def object_ref(kind: str, key: str, default_namespace: str) -> ObjectRef | None:
    """The object a queue key names, with its uid from the mirror (Events without it do not show
    in ``kubectl describe``; a bare name is in ``default_namespace``); None for keys that name no
    object (safety jobs, secrets, nodes)."""
    found = OBJECTS.get(kind)
    if found is None:
        return None
    mirror_kind, resource = found
    namespace, name = layout.split_key(key)
    obj = get_reader().get(mirror_kind, key) or {}
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    uid = str(meta.get("uid") or "") if isinstance(meta, dict) else ""
    return ObjectRef(resource.api_version, resource.kind, name,
                     namespace or default_namespace, uid)  # fmt: skip


def reporter(kind: str) -> Callable[[str, str, str], bool]:
    def report(key: str, reason: str, message: str) -> bool:
        """Outside any pass: the queue's report reads the process's settings and client itself."""
        ref = object_ref(kind, key, get_settings().namespace)
        if ref is None:
            return True
        written = recorder(control_api()).event(ref, WARNING, reason, message)
        return written is not None

    return report


def register() -> None:
    for kind in OBJECTS:
        registry.register_failure_reporter(kind, reporter(kind))


register()
