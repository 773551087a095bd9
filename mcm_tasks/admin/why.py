"""``mcm-tasks admin why KIND/NAMESPACE/NAME``: what one object waits for and since when, on one screen.

It puts together what the API server says of the object (its conditions, its phase or replica
counts, its recent Events, and for a MachineSet or MachineDeployment the machines that hold it up)
with what Redis says of its key (running, delayed until, failing with the error, quarantined, frozen,
waiting for expectations or a permit, and its last runs). It needs only Redis and the API servers:
no worker, informer or metrics endpoint has to be up, which is when an operator asks "why".

``explain`` is the pure part (the facts in, the report out); ``gather`` reads.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import redis
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, Field

from mcm_tasks import kinds
from mcm_tasks.admin.keys import KeyState, NotFound, inspect_key, when
from mcm_tasks.admin.tenants import clients
from mcm_tasks.api import Machine
from mcm_tasks.api.constants import (
    FREEZE_LABEL_KEY,
    FREEZE_LABEL_VALUE,
    MACHINE_DEPLOYMENT_NAME_LABEL_KEY,
    NODE_LABEL_KEY,
)
from mcm_tasks.controllers.common.frozen_io import is_frozen
from mcm_tasks.controllers.common.holdup import MachineWait, holding
from mcm_tasks.controllers.machine.drain.blockers import blockers, blockers_message
from mcm_tasks.controllers.machine.drain.state_io import DrainProgress, DrainStore
from mcm_tasks.kinds import Queue
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import is_not_found
from mcm_tasks.permits import PermitGiver
from mcm_tasks.queue import expectations
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import get_settings
from mcm_tasks.tracing import TRACE_ANNOTATION

#: what ``why`` explains, and the queues each one's key may wait on (a machine being deleted is
#: reconciled on ``machine-termination``)
WHY_KINDS: Final[dict[str, tuple[str, ...]]] = {
    "machine": (Queue.MACHINE.value, Queue.MACHINE_TERMINATION.value),
    "machineset": (Queue.MACHINE_SET.value,),
    "machinedeployment": (Queue.MACHINE_DEPLOYMENT.value,),
    "node": (Queue.NODE.value,),
}
RECENT_EVENTS: Final = 10


class Target(BaseModel):
    kind: str
    namespace: str
    name: str

    @property
    def key(self) -> str:
        """The queue key: ``namespace/name``, a Node's bare name."""
        return self.name if self.kind == "node" else f"{self.namespace}/{self.name}"


class ConditionView(BaseModel):
    type: str
    status: str
    reason: str = ""
    message: str = ""
    since: str = ""


class EventView(BaseModel):
    type: str
    reason: str
    message: str
    count: int = 1
    last: str = ""
    object: str = ""


class Holder(BaseModel):
    name: str
    phase: str
    waits_for: str
    seconds: float
    description: str


class Why(BaseModel):
    kind: str
    namespace: str
    name: str
    #: the object's state in one line (phase, replica counts, Ready)
    status: str
    #: what it waits for, most pressing first, one fact a line
    waits: list[str]
    conditions: list[ConditionView]
    #: each of the object's queue keys with something recorded about it
    queue: list[KeyState] = Field(default_factory=list)
    frozen: bool = False
    quarantined: bool = False
    holders: list[Holder] = Field(default_factory=list)
    events: list[EventView] = Field(default_factory=list)
    #: a Machine's trace id (``mcm-tasks.io/trace-id``, with tracing on): search the backend for it
    trace_id: str = ""


def parse_target(text: str) -> Target:
    """``KIND/NAMESPACE/NAME``; a Node also as ``node/NAME``; a namespaced kind as ``KIND/NAME`` in the
    configured namespace."""
    parts = text.split("/")
    kind = parts[0].lower()
    if kind not in WHY_KINDS:
        raise NotFound(f"cannot explain {kind!r}; one of {', '.join(WHY_KINDS)} (as KIND/NAMESPACE/NAME)")
    if len(parts) == 3 and parts[2]:
        namespace, name = parts[1], parts[2]
    elif len(parts) == 2 and parts[1]:
        namespace, name = "", parts[1]
    else:
        raise NotFound(f"{text!r} is not KIND/NAMESPACE/NAME")
    if kind == "node":
        namespace = ""
    elif not namespace:
        namespace = get_settings().namespace
    return Target(kind=kind, namespace=namespace, name=name)


def _time_text(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value or "")


def conditions_of(obj: Mapping[str, Any]) -> list[ConditionView]:
    return [
        ConditionView(
            type=str(c.get("type", "")),
            status=str(c.get("status", "")),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
            since=str(c.get("lastTransitionTime") or c.get("lastUpdateTime") or ""),
        )
        for c in ((obj.get("status") or {}).get("conditions") or [])
    ]


def events_of(items: Sequence[Mapping[str, Any]], limit: int = RECENT_EVENTS) -> list[EventView]:
    """The newest ``limit`` Events, newest first, from core/v1 or events.k8s.io/v1 objects."""

    def last(e: Mapping[str, Any]) -> str:
        series = e.get("series") or {}
        return str(
            e.get("lastTimestamp")
            or series.get("lastObservedTime")
            or e.get("eventTime")
            or e.get("firstTimestamp")
            or (e.get("metadata") or {}).get("creationTimestamp")
            or ""
        )

    views = []
    for e in items:
        involved = e.get("involvedObject") or e.get("regarding") or {}
        views.append(
            EventView(
                type=str(e.get("type") or ""),
                reason=str(e.get("reason") or ""),
                message=str(e.get("message") or e.get("note") or ""),
                count=int(e.get("count") or (e.get("series") or {}).get("count") or 1),
                last=last(e),
                object=f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
            )
        )
    return sorted(views, key=lambda v: v.last, reverse=True)[:limit]


def _status_line(target: Target, obj: Mapping[str, Any]) -> str:
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    deleting = " (being deleted)" if (obj.get("metadata") or {}).get("deletionTimestamp") else ""
    if target.kind == "machine":
        phase = (status.get("currentStatus") or {}).get("phase") or "Pending"
        op = status.get("lastOperation") or {}
        text = f"phase {phase}{deleting}"
        if op.get("description"):
            text += f"; last operation {op.get('type', '')} {op.get('state', '')}: {op['description']}"
        return text
    if target.kind == "node":
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        word = "Ready" if ready and ready.get("status") == "True" else "NotReady"
        unschedulable = ", unschedulable" if spec.get("unschedulable") else ""
        return f"{word}{unschedulable}{deleting}"
    desired = spec.get("replicas", 0)
    text = (
        f"{status.get('readyReplicas', 0)}/{desired} ready, {status.get('availableReplicas', 0)} available, "
        f"{status.get('replicas', 0)} machines"
    )
    if target.kind == "machinedeployment":
        text += f", {status.get('updatedReplicas', 0)} updated"
    generation = (obj.get("metadata") or {}).get("generation")
    observed = status.get("observedGeneration")
    if generation is not None and observed != generation:
        text += f"; generation {generation} not yet observed (observed {observed})"
    return text + deleting


class QueueFacts(BaseModel):
    """What Redis says beyond the keys' states."""

    controller_frozen: bool = False
    #: (adds, deletions, seconds until they expire) of a set's expectations
    expectations: tuple[int, int, float | None] | None = None
    #: (permit key, held) of a machine's deployment (meltdown protection)
    permit: tuple[str, int] | None = None
    #: (node, what holds its drain) of a machine being drained (the drain's progress in Redis)
    drain: tuple[str, str] | None = None


def explain(
    target: Target,
    obj: Mapping[str, Any],
    keys: Sequence[KeyState],
    facts: QueueFacts,
    holders: Sequence[MachineWait],
    events: Sequence[EventView],
    now: float,
) -> Why:
    """The report (pure): the facts ordered by how much each explains."""
    waits: list[str] = []
    labels = (obj.get("metadata") or {}).get("labels") or {}
    conditions = conditions_of(obj)
    frozen = labels.get(FREEZE_LABEL_KEY) == FREEZE_LABEL_VALUE or any(
        c.type == "Frozen" and c.status == "True" for c in conditions
    )
    quarantined = any(k.failing is not None and k.failing.quarantined for k in keys)
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        waits.append(f"being deleted since {obj['metadata']['deletionTimestamp']}")
    if frozen:
        waits.append(
            "frozen (the freeze label or Frozen condition): no scale-up until the safety job unfreezes "
            "it (mcm-tasks admin unfreeze)"
        )
    if facts.controller_frozen and target.kind == "machine":
        waits.append("the machine controller is frozen: an API server was unreachable (safety job apiserver)")
    for k in keys:
        if k.failing is not None:
            f = k.failing
            held = "quarantined (its worker died repeatedly), " if f.quarantined else ""
            waits.append(
                f"{held}failing on queue {k.kind} {f.count} times since {when(f.since)}: {f.error}: "
                f"{f.message}"
            )
        if k.running is not None:
            waits.append(
                f"running on queue {k.kind} ({k.running_on or 'worker unknown'}) for "
                f"{now - k.running.started:.1f} s"
            )
        if k.waiting:
            waits.append(f"queued on {k.kind}: a worker takes it next")
        if k.delayed_until is not None:
            waits.append(
                f"delayed on {k.kind} until {when(k.delayed_until)} (in {k.delayed_until - now:.1f} s)"
            )
    if facts.expectations is not None:
        adds, dels, expires = facts.expectations
        if adds > 0 or dels > 0:
            until = "" if expires is None else f", or {expires:.1f} s more"
            waits.append(
                f"waiting for expectations: {max(adds, 0)} creations and {max(dels, 0)} deletions to "
                f"show in the mirror{until}"
            )
    if facts.permit is not None and facts.permit[1] > 0:
        waits.append(
            f"a replacement permit of deployment {facts.permit[0]} is held ({facts.permit[1]}): "
            "a failed machine waits for it before it is marked Failed"
        )
    if facts.drain is not None:
        node, holding_drain = facts.drain
        waits.append(f"draining node {node}: " + (holding_drain or "no pod refused so far"))
    for c in conditions:
        if (
            c.type in ("Deleting", "Creating", "RollingOut", "ScalingUp", "ScalingDown")
            and c.status == "True"
        ):
            waits.append(f"{c.type}: {c.reason}: {c.message}".rstrip(": "))
        if c.type in ("Available", "Ready") and c.status != "True":
            waits.append(f"{c.type}={c.status}: {c.reason}: {c.message}".rstrip(": "))
    if holders:
        waits.append(f"{len(holders)} machine(s) not serving (below)")
    if not waits:
        waits.append("nothing: idle and settled")
    return Why(
        kind=target.kind,
        namespace=target.namespace,
        name=target.name,
        status=_status_line(target, obj),
        waits=waits,
        conditions=conditions,
        queue=list(keys),
        frozen=frozen,
        quarantined=quarantined,
        holders=[
            Holder(
                name=h.name,
                phase=h.phase,
                waits_for=h.waits_for,
                seconds=round(h.seconds, 1),
                description=h.description,
            )
            for h in holders
        ],
        events=list(events),
        trace_id=str(((obj.get("metadata") or {}).get("annotations") or {}).get(TRACE_ANNOTATION) or ""),
    )


_RESOURCES = {
    "machine": kinds.MACHINE.resource,
    "machineset": kinds.MACHINE_SET.resource,
    "machinedeployment": kinds.MACHINE_DEPLOYMENT.resource,
    "node": kinds.NODE.resource,
}


def _events(api: Any, kind: str, name: str, namespace: str | None) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    found = ops.list_(
        api, kinds.EVENT.resource, namespace, all_namespaces=namespace is None, field_selector=selector
    )
    return list(found.get("items") or [])


def _keys(target: Target, client: redis.Redis) -> list[KeyState]:
    out = []
    for queue in WHY_KINDS[target.kind]:
        try:
            out.append(inspect_key(queue, target.key, client))
        except NotFound:
            continue
    return out


def _owned(items: Sequence[Mapping[str, Any]], uids: set[str]) -> list[dict[str, Any]]:
    return [
        dict(i)
        for i in items
        if any(
            r.get("controller") and r.get("uid") in uids
            for r in ops.metadata_of(i).get("ownerReferences") or []
        )
    ]


def _drain_blockers(api: Any, progress: DrainProgress) -> str:
    """What holds the drain, read from the target cluster: the refused pods and their budgets."""
    waiting = [k for k, p in progress.pods.items() if not p.resolved]
    pods: dict[str, Any] = {}
    for key in waiting:
        namespace, _, name = key.partition("/")
        found = ops.get(api, kinds.POD.resource, name, namespace, missing_ok=True)
        if found is not None:
            pods[key] = found
    pdbs: list[Any] = []
    for namespace in sorted({k.partition("/")[0] for k in waiting}):
        pdbs += ops.list_(api, kinds.POD_DISRUPTION_BUDGET.resource, namespace).get("items") or []
    return blockers_message(blockers(progress, pods, pdbs))


def gather(target: Target, client: redis.Redis | None = None, now: float | None = None) -> Why:
    """Read everything ``explain`` needs from the API servers and Redis."""
    client = client or get_redis()
    now = time.time() if now is None else now
    facts = QueueFacts(controller_frozen=is_frozen(client))  # Redis first: unreachable, it is the one error
    with clients() as clusters:
        if target.kind == "node":
            if clusters.target is None:
                raise NotFound("no target cluster (--target-kubeconfig=none): there are no Nodes")
            api = clusters.target.api
        else:
            api = clusters.control.api
        namespace = target.namespace or None
        try:
            obj = ops.get(api, _RESOURCES[target.kind], target.name, namespace)
        except ApiException as err:
            if not is_not_found(err):
                raise
            obj = None
        if obj is None:
            raise NotFound(f"no {target.kind} {target.key} on the API server")
        kind_name = str(obj.get("kind") or _RESOURCES[target.kind].kind)
        events = _events(api, kind_name, target.name, namespace)
        holders: list[MachineWait] = []
        when_now = datetime.fromtimestamp(now, UTC)
        control = clusters.control.api
        if target.kind in ("machineset", "machinedeployment"):
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            machines = ops.list_(control, kinds.MACHINE.resource, namespace).get("items") or []
            uids = {uid}
            if target.kind == "machinedeployment":
                sets = ops.list_(control, kinds.MACHINE_SET.resource, namespace).get("items") or []
                uids = {str(s["metadata"].get("uid")) for s in _owned(sets, {uid})}
            else:
                counts = expectations.pending(target.key, client)
                if counts is not None:
                    facts.expectations = (*counts, expectations.expires_in(target.key, client))
            holders = holding([Machine.model_validate(m) for m in _owned(machines, uids)], when_now)
        if target.kind == "machine":
            labels = (obj.get("metadata") or {}).get("labels") or {}
            deployment = labels.get(MACHINE_DEPLOYMENT_NAME_LABEL_KEY)
            if deployment:
                permit_key = f"{target.namespace}/{deployment}"
                facts.permit = (permit_key, PermitGiver(client).held(permit_key))
            node = labels.get(NODE_LABEL_KEY)
            if node and clusters.target is not None:
                events += _events(clusters.target.api, "Node", node, None)
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            progress = DrainStore(client).load(target.key, uid)
            if progress is not None and clusters.target is not None:
                facts.drain = (progress.node, _drain_blockers(clusters.target.api, progress))
        return explain(target, obj, _keys(target, client), facts, holders, events_of(events), now)
