"""What the safety jobs read: whole kinds at once, from the informers' mirror once it holds a complete
list of the kind, else from the API server (a worker started before the informer synced, tests).

An object that does not parse is reported on itself (``controllers.problems``) and left out: a fleet-wide
job must not fail for everyone because of one bad object.

Deletions of cloud VMs never rest on the mirror alone: ``machine_live`` confirms a candidate against
the API server first, because a mirror that lags a just-created Machine would make its VM look orphaned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import redis

from mcm_tasks import kinds
from mcm_tasks.api import K8sObject, Machine, MachineClass, MachineDeployment, MachineSet
from mcm_tasks.cache import get_listers
from mcm_tasks.cache.layout import BY_OWNER
from mcm_tasks.cache.listers import Lister
from mcm_tasks.cache.models import Unreadable, parse_object
from mcm_tasks.controllers.common import context
from mcm_tasks.controllers.problems import parse_each
from mcm_tasks.controllers.safety import overshooting
from mcm_tasks.kube import ops
from mcm_tasks.kube.resources import Resource
from mcm_tasks.settings import get_settings

Obj = dict[str, Any]
M = TypeVar("M", bound=K8sObject)


def _list(lister: Lister[M], res: Resource, model: type[M]) -> list[M]:
    """Every object of a kind in the control namespace that can be read: one that does not parse is
    reported on itself and left out, so that the job still covers all the others."""
    return parse_each(
        model, context.list_objects(lister, context.control_api(), res, get_settings().namespace)
    )


def machines() -> list[Machine]:
    return _list(get_listers().machines, kinds.MACHINE.resource, Machine)


def owner_view(raw: Obj) -> Machine:
    """A machine as a count by owner reads it: its metadata alone (the ownerReferences)."""
    return parse_object(Machine, {"metadata": raw.get("metadata") or {}})


def machines_per_owner(owner_uids: Sequence[str]) -> dict[str, int]:
    """How many machines each owner uid controls, every machine counted (one whose content our model
    refuses is a VM all the same, and its own reconcile reports it).

    From the mirror once synced: the size of each uid's owner index entry, one round trip and no
    machine read (at a thousand machines, reading and parsing them was all of the overshooting job's
    time). Else one LIST, each machine read for its metadata (``owner_view``)."""
    lister = get_listers().machines
    uids = list(owner_uids)
    try:
        sizes = lister.reader.index_sizes_if_synced(lister.kind, BY_OWNER, uids)
    except redis.RedisError:
        sizes = None
    if sizes is not None:
        return {uid: n for uid, n in zip(uids, sizes, strict=True) if n}
    items = ops.list_(context.control_api(), kinds.MACHINE.resource, get_settings().namespace)["items"]
    views = []
    for raw in items:
        try:
            views.append(owner_view(raw))
        except Unreadable:
            continue  # not even its metadata: no owner to count it for
    return overshooting.machines_per_owner(views)


def machine_sets() -> list[MachineSet]:
    return _list(get_listers().machine_sets, kinds.MACHINE_SET.resource, MachineSet)


def machine_deployments() -> list[MachineDeployment]:
    return _list(get_listers().machine_deployments, kinds.MACHINE_DEPLOYMENT.resource, MachineDeployment)


def machine_classes() -> list[MachineClass]:
    return _list(get_listers().machine_classes, kinds.MACHINE_CLASS.resource, MachineClass)


def nodes() -> list[Obj] | None:
    """The target cluster's Nodes; None in no-target mode."""
    api = context.target_api()
    if api is None:
        return None
    return context.list_objects(get_listers().nodes, api, kinds.NODE.resource)


def machine_live(name: str, namespace: str) -> Machine | None:
    return context.get_machine_live(name, namespace)


def machines_live() -> list[Machine]:
    """Every Machine as the API server has it now (after an outage the mirror may still be catching up)."""
    items = ops.list_(context.control_api(), kinds.MACHINE.resource, get_settings().namespace)["items"]
    return parse_each(Machine, items)
