"""The Secret reconcile (upstream ``reconcileClusterSecret``): a secret referenced by a MachineClass
(``secretRef`` or ``credentialsSecretRef``) carries the ``machine.sapcloud.io/machine-controller``
finalizer, so it cannot disappear under machines that still need it; an unreferenced one does not. Comes
back after ``class_resync_period``.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.api import MachineClass
from mcm_tasks.api.constants import MC_SECRET_FINALIZER
from mcm_tasks.cache import get_listers
from mcm_tasks.cache.layout import object_key
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.finalizers_io import write_finalizers
from mcm_tasks.controllers.common.registration import scoped
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.controllers.problems_io import answers_unreadable
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import get_settings

log = logging.getLogger(__name__)


def references(machine_class: MachineClass, secret_key: str) -> bool:
    namespace = machine_class.metadata.namespace or ""
    return any(
        object_key(ref.namespace or namespace, ref.name) == secret_key
        for ref in context_io.secret_refs(machine_class)
    )


def classes_referencing(api: ApiClient, secret_key: str) -> list[MachineClass]:
    """The classes that reference a secret (upstream ``findMachineClassForSecret``) and can be read,
    through ``list_objects``: the mirror's secret index, else one LIST of the controller's own
    namespace (as upstream's namespaced lister: a namespaced Role allows no more)."""
    lister = get_listers().machine_classes
    raws = context_io.list_objects(
        lister,
        api,
        kinds.MACHINE_CLASS.resource,
        mirror=lambda: lister.raw.referencing_secret(secret_key),
    )
    return [c for c in context_io.readable(MachineClass, raws) if references(c, secret_key)]


def get_secret_meta(api: ApiClient, name: str, namespace: str) -> dict[str, Any] | None:
    """The secret's metadata only: this reconcile never needs its data."""
    found = context_io.get_raw(get_listers().secrets, api, kinds.SECRET.resource, name, namespace)
    return None if found is None else dict(found.get("metadata") or {})


def _read(key: str) -> dict[str, Any] | None:
    """The secret's metadata a pass over ``key`` is about, read before its scope is built."""
    namespace, name = context_io.namespace_of(key, get_settings().namespace)
    return get_secret_meta(context_io.control_api(), name, namespace)


def secret_pass(scope: PassScope[dict[str, Any]]) -> Requeue | None:
    """Upstream: ``findMachineClassForSecret``, ``addSecretFinalizers``, ``deleteSecretFinalizers``."""
    namespace, name = context_io.namespace_of(scope.key, scope.settings.namespace)
    meta = scope.obj
    secret_key = object_key(namespace, name)
    referenced = bool(classes_referencing(scope.api, secret_key))
    deleting = bool(meta.get("deletionTimestamp"))
    if referenced and deleting:
        log.info("secret %s: still referenced by a MachineClass, keeping its finalizer", secret_key)
        return Requeue.short()
    wanted, unwanted = (MC_SECRET_FINALIZER, None) if referenced else (None, MC_SECRET_FINALIZER)
    if not write_finalizers(
        scope.api, kinds.SECRET.resource, name, namespace, meta, add=wanted, remove=unwanted
    ):
        return Requeue.conflict()
    return None if deleting else Requeue(scope.settings.class_resync_period)


#: the ``secret`` queue's reconciler: the scope of the secret's metadata, then ``secret_pass``
reconcile_secret = answers_unreadable(scoped(_read, secret_pass, PassScope.begin))
