"""What the safety jobs read: whole kinds at once, from the informers' mirror once it holds a complete
list of the kind, else from the API server (a worker started before the informer synced, tests).

Each job reads of the fleet's kinds only what its decisions need, because what a fleet-wide job reads
grows with the fleet and the decisions need little of it: overshooting counts machines by the size of
their owner index (``machines_per_owner``), the orphan job reads five strings of each machine
(``orphan_facts``) and decodes only the Nodes a change is possible for (``nodes_to_judge``).

A MachineSet, MachineDeployment or MachineClass that does not parse is reported on itself
(``controllers.problems_io``) and left out: a fleet-wide job must not fail for everyone because of one
bad object. A machine is not reported here (its own reconcile does it) and is counted by its owner
whatever its content.

Deletions of cloud VMs never rest on the mirror alone: ``machine_live`` confirms a candidate against
the API server first, because a mirror that lags a just-created Machine would make its VM look orphaned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import orjson
import redis

from mcm_tasks import kinds
from mcm_tasks.api import K8sObject, Machine, MachineClass, MachineDeployment, MachineSet, Obj
from mcm_tasks.api.constants import NODE_LABEL_KEY
from mcm_tasks.cache import get_listers
from mcm_tasks.cache.layout import BY_OWNER
from mcm_tasks.cache.listers import Lister
from mcm_tasks.cache.models import Unreadable, parse_object
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.controllers.problems_io import parse_each
from mcm_tasks.controllers.safety import orphans, overshooting
from mcm_tasks.controllers.safety.orphans import MachineFacts
from mcm_tasks.kube import ops
from mcm_tasks.kube.resources import Resource

M = TypeVar("M", bound=K8sObject)


def _list(scope: PassScope[Any], lister: Lister[M], res: Resource, model: type[M]) -> list[M]:
    """Every object of a kind in the control namespace that can be read: one that does not parse is
    reported on itself and left out, so that the job still covers all the others."""
    return parse_each(scope, model, context_io.list_objects(lister, scope.api, res, scope.settings.namespace))


def _obj(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _stored_if_synced(lister: Lister[Any]) -> dict[str, bytes] | None:
    """The mirror's stored objects of the lister's kind (name → JSON) when it holds them all; None
    when it does not or Redis is away: the caller LISTs from the API server instead."""
    try:
        return lister.reader.list_stored_if_synced(lister.kind)
    except redis.RedisError:
        return None


def orphan_facts(raw: Obj) -> MachineFacts | None:
    """What the orphan job decides on, read straight from a stored machine (``facts_of`` would parse
    the whole model first, its conditions and node template included, for five strings); None for a
    machine without a name. Content of another type than the schema's reads as absent."""
    meta, status = _obj(raw.get("metadata")), _obj(raw.get("status"))
    name = _text(meta.get("name"))
    if not name:
        return None
    return MachineFacts(
        name,
        _text(meta.get("namespace")),
        _text(_obj(raw.get("spec")).get("providerID")),
        _text(_obj(status.get("currentStatus")).get("phase")),
        _text(_obj(meta.get("labels")).get(NODE_LABEL_KEY)),
    )


def machines_for_orphans(scope: PassScope[Any]) -> list[MachineFacts]:
    """Every machine of the control namespace, as ``orphan_facts``: from the mirror once synced, else
    one LIST. Nothing is kept between runs (the job runs every 15 minutes: keeping a thousand
    machines' stored JSON to recognise unchanged ones would hold megabytes in every worker process)."""
    namespace = scope.settings.namespace
    stored = _stored_if_synced(get_listers().machines)
    if stored is None:
        items = ops.list_(scope.api, kinds.MACHINE.resource, namespace)["items"]
    else:
        items = [orjson.loads(raw) for raw in stored.values()]
    found = (orphan_facts(raw) for raw in items)
    return [m for m in found if m is not None and m.namespace == namespace]


def owner_view(raw: Obj) -> Machine:
    """A machine as a count by owner reads it: its metadata alone (the ownerReferences)."""
    return parse_object(Machine, {"metadata": raw.get("metadata") or {}})


def machines_per_owner(scope: PassScope[Any], owner_uids: Sequence[str]) -> dict[str, int]:
    """How many machines each owner uid controls, every machine counted (one whose content our model
    refuses is a VM all the same, and its own reconcile reports it).

    From the mirror once synced: the size of each uid's owner index entry, one round trip and no
    machine read or parsed (the count needs none). Else one LIST, each machine read for its metadata
    (``owner_view``)."""
    lister = get_listers().machines
    uids = list(owner_uids)
    try:
        sizes = lister.reader.index_sizes_if_synced(lister.kind, BY_OWNER, uids)
    except redis.RedisError:
        sizes = None
    if sizes is not None:
        return {uid: n for uid, n in zip(uids, sizes, strict=True) if n}
    items = ops.list_(scope.api, kinds.MACHINE.resource, scope.settings.namespace)["items"]
    views = []
    for raw in items:
        try:
            views.append(owner_view(raw))
        except Unreadable:
            continue  # not even its metadata: no owner to count it for
    return overshooting.machines_per_owner(views)


def machine_sets(scope: PassScope[Any]) -> list[MachineSet]:
    return _list(scope, get_listers().machine_sets, kinds.MACHINE_SET.resource, MachineSet)


def machine_deployments(scope: PassScope[Any]) -> list[MachineDeployment]:
    return _list(
        scope, get_listers().machine_deployments, kinds.MACHINE_DEPLOYMENT.resource, MachineDeployment
    )


def machine_classes(scope: PassScope[Any]) -> list[MachineClass]:
    return _list(scope, get_listers().machine_classes, kinds.MACHINE_CLASS.resource, MachineClass)


def nodes_to_judge(scope: PassScope[Any], claims: Mapping[str, int]) -> list[Obj] | None:
    """The target cluster's Nodes the unmanaged-node sweep may have to change, given how many machines
    claim each node name; None in no-target mode.

    From the mirror once synced, a node is decoded only when ``orphans.may_need_action`` says its
    stored JSON leaves a change possible: at rest every node is claimed once and carries no
    not-managed annotation, so most Nodes (their status is most of their size) are never decoded.
    Else one LIST, every node judged."""
    api = scope.target
    if api is None:
        return None
    stored = _stored_if_synced(get_listers().nodes)
    if stored is None:
        return list(ops.list_(api, kinds.NODE.resource)["items"])
    return [
        orjson.loads(raw) for name, raw in stored.items() if orphans.may_need_action(raw, claims.get(name, 0))
    ]


def machine_live(scope: PassScope[Any], name: str, namespace: str) -> Machine | None:
    return context_io.get_machine_live(scope.api, name, namespace)


def machines_live(scope: PassScope[Any]) -> list[Machine]:
    """Every Machine as the API server has it now (after an outage the mirror may still be catching up)."""
    items = ops.list_(scope.api, kinds.MACHINE.resource, scope.settings.namespace)["items"]
    return parse_each(scope, Machine, items)
