"""The reads and writes of a MachineDeployment reconcile, held by one ``Context`` per pass.

Reads: the deployment itself from the API server (as MCM reads it: every decision starts from its
latest spec); MachineSets, Machines and Nodes from the informers' mirror once it holds a complete
list of the kind, else from the API server. A pass may also run with ``live=True``: everything from
the API server (the reconcile's second attempt after a write met a Conflict), except what the
rollout's node bookkeeping reads (``lag_ok``): the taints and the autoscaler protection are idempotent
marks, re-decided on each pass and written with the node's resourceVersion, so a lagging mirror costs
at most a mark one pass late, while a live LIST of every machine and node of a deployment of
hundreds cost the second attempt most of its time (issue 19).

Writes carry the resourceVersion they were decided on, so a decision made on a stale read fails
with a Conflict instead of overwriting a newer object; the reconcile then decides again on fresh
reads. The context keeps the deployment and its sets as written, so later steps of the same pass
build on the writes of earlier ones; the deployment's status is accumulated in memory
(``ctx.deployment.status``) and written once at the end, only when it differs from what was read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.api import MachineDeployment, MachineDeploymentStatus, MachineSet, Obj, dump
from mcm_tasks.api.constants import MCM_FINALIZER, NODE_LABEL_KEY
from mcm_tasks.cache import get_listers
from mcm_tasks.cache.layout import object_key
from mcm_tasks.cache.models import Unreadable, parse_object
from mcm_tasks.controllers.common.context_io import control_api, list_objects, mirror_has
from mcm_tasks.controllers.common.finalizers import with_finalizer
from mcm_tasks.controllers.common.lagging_io import wake
from mcm_tasks.controllers.common.owners import selects
from mcm_tasks.controllers.common.scope import ObjectName, PassScope
from mcm_tasks.controllers.common.template import merge_diff
from mcm_tasks.controllers.machinedeployment.conditions import with_why
from mcm_tasks.controllers.machinedeployment.seen import MACHINE_NODES
from mcm_tasks.controllers.machinedeployment.status import status_key
from mcm_tasks.kinds import Queue
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import is_not_found
from mcm_tasks.kube.events import EventRecorder, EventType

log = logging.getLogger(__name__)


def get_deployment(api: ApiClient, name: str, namespace: str) -> MachineDeployment | None:
    data = ops.get(api, kinds.MACHINE_DEPLOYMENT.resource, name, namespace, missing_ok=True)
    return None if data is None else parse_object(MachineDeployment, data)


@dataclass(kw_only=True)
class Context(PassScope[MachineDeployment]):
    """One pass over one deployment (upstream's ``deployment`` in ``reconcileClusterMachineDeployment``):
    the controller's ``PassScope`` (clients, listers, recorder, settings, clock, memo) with the
    deployment and its sets as last written in the pass."""

    live: bool = False
    #: the status as read, to write only a changed one. The object read itself, not a copy: a pass
    #: replaces the deployment's status (``model_copy(update=…)``, ``ctx.deployment.status = …``)
    #: and never edits a status in place (``test_a_pass_leaves_the_status_it_read_as_it_was``), and
    #: the deep copies cost a pass about a fifth of its CPU
    observed: MachineDeploymentStatus = field(init=False)
    #: the sets the deployment controls (after claiming), as last read or written
    sets: list[MachineSet] = field(default_factory=list)
    #: the machines of ``sets`` by set uid, as read live (or per the pass) and from the mirror
    _machines: dict[bool, dict[str, list[Obj]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.observed = self.deployment.status

    @classmethod
    def start(cls, deployment: MachineDeployment, *, live: bool = False) -> Context:
        return cls.begin(deployment.key, deployment, live=live)

    @staticmethod
    def read(namespace: str, name: str) -> MachineDeployment | None:
        """The deployment a pass is about, read from the API server before its scope is built (so
        with the process's client)."""
        return get_deployment(control_api(), name, namespace)

    deployment = ObjectName[MachineDeployment]()

    @property
    def namespace(self) -> str:
        return self.deployment.metadata.namespace or self.settings.namespace

    @property
    def events(self) -> EventRecorder:
        return self.recorder

    def event(self, type_: EventType, reason: str, message: str) -> None:
        self.events.event(self.deployment, type_, reason, message)

    # --- reads ---------------------------------------------------------------------------------------

    def candidate_sets(self) -> list[MachineSet]:
        """Sets the deployment controls, and orphans its selector picks (adoption candidates). A set
        that does not parse is left out, as the listers leave it out of every list: its own
        reconcile reports it, and it cannot stall its deployment."""
        uid = self.deployment.metadata.uid or ""
        selector = self.deployment.spec.selector
        raws = list_objects(
            get_listers().machine_sets, self.api, kinds.MACHINE_SET.resource, self.namespace, live=self.live
        )
        out = []
        for raw in raws:
            ref = next((r for r in _meta(raw).get("ownerReferences") or () if r.get("controller")), None)
            if (ref is not None and ref.get("uid") == uid) or (
                ref is None and selects(selector, _meta(raw).get("labels") or {})
            ):
                try:
                    out.append(parse_object(MachineSet, raw))
                except Unreadable:
                    continue
        return out

    def machines_of(self, machine_set: MachineSet, *, lag_ok: bool = False, once: bool = False) -> list[Obj]:
        """The machines a set controls, as API dicts (only names, labels, phases are read from them).
        From the mirror they are shared through the parsed-object cache (read-only): a rollout's
        passes read every machine of the deployment, and most have not changed since the last.
        ``lag_ok``: from the mirror even in a live pass (see the module). ``once``: a read that the
        next passes do not repeat (the end of a rollout): decoded for this pass alone, not kept in
        the process's cache, where a deployment of a thousand machines held ~8 MB of dicts that
        nothing read again (issue 28: memory at rest)."""
        live = self.live and not lag_ok
        grouped = self._machines.get(live)
        if grouped is None:
            grouped = self._machines[live] = self._load_machines(live, once)
        return grouped.get(machine_set.metadata.uid or "", [])

    def _load_machines(self, live: bool, once: bool) -> dict[str, list[Obj]]:
        uids = {ms.metadata.uid or "" for ms in self.sets}
        lister = get_listers().machines
        grouped: dict[str, list[Obj]] = {uid: [] for uid in uids}

        def owned_in_mirror() -> list[Obj]:
            view = lister.raw if once else lister.raw_shared
            return [m for uid in uids for m in view.owned_by(uid) if _namespace(m) == self.namespace]

        for machine in list_objects(
            lister, self.api, kinds.MACHINE.resource, self.namespace, mirror=owned_in_mirror, live=live
        ):
            ref = next((r for r in _meta(machine).get("ownerReferences") or () if r.get("controller")), None)
            if ref is not None and ref.get("uid") in grouped:
                grouped[ref["uid"]].append(machine)
        return grouped

    def get_nodes(self, names: Sequence[str], *, lag_ok: bool = False, once: bool = False) -> dict[str, Obj]:
        """The named Nodes that exist (one round trip: a batched cache read, or one LIST). From the
        mirror they are shared through the parsed-object cache (read-only): the autoscaler
        protection reads every node of the deployment on each pass of a rollout. ``lag_ok``: from
        the mirror even in a live pass (see the module); ``once``: as ``machines_of``'s."""
        if self.target is None or not names:
            return {}
        lister = get_listers().nodes
        wanted = set(names)

        def in_mirror() -> list[Obj]:
            return list((lister.raw if once else lister.raw_shared).get_many(names))  # one batched read

        live = self.live and not lag_ok
        found = list_objects(lister, self.target, kinds.NODE.resource, mirror=in_mirror, live=live)
        return {str(_meta(n).get("name")): n for n in found if _meta(n).get("name") in wanted}

    def nodes_of(self, machine_sets: Sequence[MachineSet], max_age: float) -> list[str]:
        """The nodes of the sets' machines (their ``node`` label), each once, for the rollout's node
        bookkeeping: from the mirror even in a live pass (``lag_ok``), and only the machines this
        process does not remember the node of (``seen.MACHINE_NODES``, learnt within ``max_age``)
        are read; the others are only listed (one index read per set)."""
        lister = get_listers().machines
        if not mirror_has(lister):
            machines = (m for ms in machine_sets for m in self.machines_of(ms, lag_ok=True))
            labels = (_meta(m).get("labels") or {} for m in machines)
            return list(dict.fromkeys(n for n in (lb.get(NODE_LABEL_KEY) for lb in labels) if n))
        # a machine's key with its set's uid: a namesake in another set (or a set re-created) is another
        uids = [ms.metadata.uid or "" for ms in machine_sets]
        keys = [(uid, k) for uid in uids for k in lister.keys_owned_by(uid)]
        known = MACHINE_NODES.fresh(keys, max_age)
        learnt: dict[tuple[str, str], str] = {}
        owners = {k: uid for uid, k in keys if (uid, k) not in known}
        for machine in lister.raw_shared.get_many(list(owners)):
            key = object_key(_namespace(machine), str(_meta(machine).get("name")))
            node = (_meta(machine).get("labels") or {}).get(NODE_LABEL_KEY)
            if node and key in owners:
                learnt[owners[key], key] = node
        MACHINE_NODES.remember(learnt, max_age)
        return list(dict.fromkeys(n for n in (known.get(k) or learnt.get(k) for k in keys) if n))

    def get_machine(self, name: str) -> Obj | None:
        lister = get_listers().machines
        if not self.live and mirror_has(lister):
            found: Obj | None = lister.raw.get(name, self.namespace)
            return found
        return ops.get(self.api, kinds.MACHINE.resource, name, self.namespace, missing_ok=True)

    # --- the deployment ------------------------------------------------------------------------------

    def _took(self, written: Obj) -> MachineDeployment:
        """The deployment as the server wrote it, with the status this pass accumulated."""
        fresh = MachineDeployment.model_validate(written)
        self.deployment = fresh.model_copy(update={"status": self.deployment.status})
        return self.deployment

    def patch_deployment(self, body: dict[str, Any], *, guarded: bool = True) -> MachineDeployment:
        """A merge patch of the deployment's metadata/spec; ``guarded`` adds its resourceVersion."""
        if guarded:
            meta = dict(body.get("metadata") or {})
            meta["resourceVersion"] = self.deployment.metadata.resource_version
            body = {**body, "metadata": meta}
        written = ops.patch(
            self.api,
            kinds.MACHINE_DEPLOYMENT.resource,
            self.deployment.metadata.name or "",
            body,
            self.namespace,
        )
        return self._took(written)

    def update_deployment(self, desired: MachineDeployment) -> MachineDeployment:
        """Write the difference between the deployment and ``desired`` (labels, annotations, spec)."""
        patch = merge_diff(_writable(self.deployment), _writable(desired))
        return self.patch_deployment(patch) if patch else self.deployment

    def set_finalizer(self, present: bool) -> None:
        meta = self.deployment.metadata
        if meta.has_finalizer(MCM_FINALIZER) == present:
            return
        finalizers = with_finalizer(meta.finalizers, MCM_FINALIZER, present)
        self.patch_deployment({"metadata": {"finalizers": finalizers or None}})

    def write_status(self, status: MachineDeploymentStatus | None = None) -> bool:
        """Write the accumulated (or given) status if it differs from what was read; whether it wrote."""
        if status is not None:
            self.deployment = self.deployment.model_copy(update={"status": status})
        explained = with_why(self.deployment, self.deployment.status, self.sets, self.now)
        self.deployment = self.deployment.model_copy(update={"status": explained})
        if status_key(self.deployment.status) == status_key(self.observed):
            return False
        body = self.deployment.status_body()
        written = ops.update_status(self.api, kinds.MACHINE_DEPLOYMENT.resource, body)
        fresh = MachineDeployment.model_validate(written)
        self.deployment = fresh
        self.observed = fresh.status
        return True

    # --- machine sets --------------------------------------------------------------------------------

    def replace_set(self, written: MachineSet) -> MachineSet:
        uid = written.metadata.uid
        self.sets = [written if ms.metadata.uid == uid else ms for ms in self.sets]
        return written

    def update_set(self, current: MachineSet, desired: MachineSet) -> MachineSet:
        """Write the difference between two versions of a set (metadata and spec), guarded. Equal
        models write nothing, without dumping either (a pass syncs its new set every time)."""
        if desired == current:
            return current
        patch = merge_diff(_writable(current), _writable(desired))
        if not patch:
            return current
        patch.setdefault("metadata", {})["resourceVersion"] = current.metadata.resource_version
        name = current.metadata.name or ""
        written = ops.patch(self.api, kinds.MACHINE_SET.resource, name, patch, current.metadata.namespace)
        wake(
            self.settings, [(Queue.MACHINE_SET, current.key)]
        )  # while the mirror lags: the set acts on it at once
        return self.replace_set(MachineSet.model_validate(written))

    def create_set(self, body: MachineSet) -> MachineSet:
        written = MachineSet.model_validate(
            ops.create(self.api, kinds.MACHINE_SET.resource, dump(body), self.namespace)
        )
        self.sets = [*self.sets, written]
        wake(self.settings, [(Queue.MACHINE_SET, written.key)])  # while the mirror lags
        return written

    def read_set(self, name: str) -> MachineSet | None:
        data = ops.get(self.api, kinds.MACHINE_SET.resource, name, self.namespace, missing_ok=True)
        return None if data is None else MachineSet.model_validate(data)

    def delete_set(self, machine_set: MachineSet) -> None:
        """DELETE with a uid precondition (a namesake is not ours); gone already is fine."""
        try:
            ops.delete(
                self.api,
                kinds.MACHINE_SET.resource,
                machine_set.metadata.name or "",
                self.namespace,
                uid=machine_set.metadata.uid,
            )
        except Exception as err:
            if not is_not_found(err):
                raise


def _writable(obj: MachineSet | MachineDeployment) -> dict[str, Any]:
    """What a controller may change on an object: labels, annotations and spec."""
    data = dump(obj)
    meta = data.get("metadata") or {}
    return {
        "metadata": {"annotations": meta.get("annotations") or {}, "labels": meta.get("labels") or {}},
        "spec": data.get("spec") or {},
    }


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _namespace(obj: Obj) -> str | None:
    value = _meta(obj).get("namespace")
    return value if isinstance(value, str) else None
