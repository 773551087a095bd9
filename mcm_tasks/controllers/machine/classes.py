"""The MachineClass reconcile (upstream ``reconcileClusterMachineClass``).

As upstream's ``reconcileClusterMachineClass``: a class that machines use and that is not being
deleted carries the MCM finalizer; when the finalizer is first added, the class's machines are
enqueued, since their reconciles wait for it (a new machine of an unused class enqueues the class
itself). A class no machine uses loses the finalizer, deleted or not; a class being deleted keeps
it while machines still use it, and enqueues them on each of its passes (ShortRetry apart), as the
seeds' flow of ``reconcileClusterMachineClass`` does (upstream's current code only retries). Every
class comes back after ``class_resync_period``.

Not in upstream: a class not being deleted that cannot make machines (an invalid node template, a
missing secret, an unknown provider) gets a Warning Event saying why, so that a broken class is
answered even before a machine uses it (upstream says nothing until a machine fails).
"""

from __future__ import annotations

import logging
from typing import Final

from mcm_tasks import kinds
from mcm_tasks.api import MachineClass
from mcm_tasks.api.constants import MCM_FINALIZER
from mcm_tasks.api.validation import validate_machine_class
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.finalizers_io import write_finalizers
from mcm_tasks.controllers.common.lagging_io import mirror_lagging
from mcm_tasks.controllers.common.registration import scoped
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.controllers.problems_io import answers_unreadable, warn
from mcm_tasks.kinds import machine_queue_items
from mcm_tasks.queue import Requeue, enqueue_many
from mcm_tasks.settings import get_settings
from providers import provider_names

log = logging.getLogger(__name__)

INVALID_CLASS_REASON: Final = "InvalidMachineClass"
MAX_MESSAGE = 1000


def class_problems(machine_class: MachineClass, missing_secrets: list[str]) -> list[str]:
    """What keeps a class from making machines that can be told without the cloud: its node template,
    its secrets, its provider. (The providerSpec is the driver's to judge: a bad one is reported on
    each machine's create and by the orphan-VM job, which lists the class's VMs through the driver.)"""
    problems = [str(e) for e in validate_machine_class(machine_class)]
    problems += [f"secret {ref} not found" for ref in missing_secrets]
    known = provider_names()
    if machine_class.provider not in known:
        shown = repr(machine_class.provider)
        shown = shown if len(shown) <= 64 else shown[:61] + "..."
        problems.append(f"provider: {shown} is not one of the installed providers ({', '.join(known)})")
    return problems


def _report_problems(scope: PassScope[MachineClass], machine_class: MachineClass) -> None:
    loaded = context_io.load_class_context(scope.api, machine_class, scope.settings)
    problems = class_problems(machine_class, loaded.missing_secrets)
    if problems:
        message = f"MachineClass {machine_class.metadata.name} cannot make machines: " + "; ".join(problems)
        log.warning("machine class %s: %s", scope.key, message)
        warn(scope, machine_class, INVALID_CLASS_REASON, message[:MAX_MESSAGE])


def _read(key: str) -> MachineClass | None:
    """The class a pass over ``key`` is about, read before its scope is built."""
    namespace, name = context_io.namespace_of(key, get_settings().namespace)
    return context_io.get_machine_class(context_io.control_api(), name, namespace)


def machine_class_pass(scope: PassScope[MachineClass]) -> Requeue | None:
    """Upstream: ``addMachineClassFinalizers``, ``deleteMachineClassFinalizers``."""
    key, machine_class = scope.key, scope.obj
    resync = Requeue(scope.settings.class_resync_period)
    meta = machine_class.metadata
    if not meta.is_deleting:
        _report_problems(scope, machine_class)
    namespace, name = context_io.namespace_of(key, scope.settings.namespace)
    in_use = context_io.class_in_use(scope.api, name, namespace, lagging=mirror_lagging(scope.settings))
    if not meta.is_deleting and in_use:
        if MCM_FINALIZER not in meta.finalizers:
            if not _write_finalizer(scope, add=MCM_FINALIZER):
                return Requeue.conflict()
            enqueue_many(machine_queue_items(context_io.machines_of_class(scope.api, name, namespace)))
        return resync
    if in_use:
        # the seeds' flow: a class being deleted that machines still use enqueues them, so each pass
        # of theirs (a deletion under way, a failure to report) runs while the class waits on them
        log.info("machine class %s: being deleted but still used by machines, keeping its finalizer", key)
        enqueue_many(machine_queue_items(context_io.machines_of_class(scope.api, name, namespace)))
        return Requeue.short()
    if MCM_FINALIZER in meta.finalizers and not _write_finalizer(scope, remove=MCM_FINALIZER):
        return Requeue.conflict()
    return None if meta.is_deleting else resync


#: the ``machineclass`` queue's reconciler: the class's scope, then ``machine_class_pass``
reconcile_machine_class = answers_unreadable(scoped(_read, machine_class_pass, PassScope.begin))


def _write_finalizer(
    scope: PassScope[MachineClass], *, add: str | None = None, remove: str | None = None
) -> bool:
    """MCM's finalizer on or off the class, on the version read (once more on a live read after a
    Conflict); False when the class keeps changing under the pass (``write_finalizers``)."""
    meta = scope.obj.metadata
    read = {"finalizers": meta.finalizers, "resourceVersion": meta.resource_version}
    return write_finalizers(
        scope.api, kinds.MACHINE_CLASS.resource, meta.name or "", meta.namespace, read, add=add, remove=remove
    )
