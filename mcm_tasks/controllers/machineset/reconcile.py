"""The MachineSet reconcile (MCM's reconcileClusterMachineSet), on the queue contract.

Order: read the set; gone → forget its expectations; invalid → skip with a Warning event; add the
finalizer; read whether its expectations are met (before listing its machines, as upstream); claim
machines (adopt selected orphans, release the unselected); propagate the node template, machine
configuration and class kind in place; then either manageReplicas (only when the expectations of the
previous pass are met) or, for a set being deleted, delete every machine and drop
the finalizer once none is left; finally the status, written only when it changed. It comes back
after LongRetry (MCM's 10 minutes), sooner through the informer whenever a machine of the set changes.

The pass runs in a ``MachineSetScope`` (``controllers/machineset/scope.py``) that registration builds
around the set it read (``registration.scoped``); the phases take it.

Reads come from the informers' mirror once it holds a complete list of the kind, else from the API
server (tests without an informer, a worker that started first). Writes go to the API server only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, Final

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineSet
from mcm_tasks.api.constants import (
    DELETION_ORDER_ANNOTATION,
    MARKED_FOR_DELETION_TIME_ANNOTATION,
    MCM_FINALIZER,
    NODE_LABEL_KEY,
    PRESERVE_ANNOTATION,
    PRESERVE_AUTO_PRESERVED,
    SCALE_UP_DISABLED_LABEL_KEY,
)
from mcm_tasks.api.validation import validate_machine_set
from mcm_tasks.cache import get_listers
from mcm_tasks.cache.layout import BY_OWNER, split_key
from mcm_tasks.cache.models import Unreadable, get_parsed_cache, parse_object
from mcm_tasks.controllers.common import context_io, preservation
from mcm_tasks.controllers.common.claim_io import claim_children, recheck_owner
from mcm_tasks.controllers.common.context_io import (
    get_node,
    get_object,
    get_pass_object,
    list_objects,
    mirror_has,
    set_setting,
)
from mcm_tasks.controllers.common.finalizers import with_finalizer
from mcm_tasks.controllers.common.lagging_io import mirror_lagging, wake
from mcm_tasks.controllers.common.owners import selects
from mcm_tasks.controllers.common.registration import scoped
from mcm_tasks.controllers.machineset import control_io, spacing, spacing_io, status, status_io
from mcm_tasks.controllers.machineset.conditions import scaling_conditions
from mcm_tasks.controllers.machineset.facts import (
    Census,
    FactsOf,
    SetFacts,
    census_of,
    facts_of,
    set_identity,
)
from mcm_tasks.controllers.machineset.replicas import (
    SKIP_FROZEN,
    DeletionOrder,
    ReplicaPlan,
    deletion_order_of,
    is_failed,
    is_terminating,
    plan_replicas,
)
from mcm_tasks.controllers.machineset.scope import MachineSetScope
from mcm_tasks.controllers.machineset.spacing_io import spaced
from mcm_tasks.controllers.machineset.sync_io import propagate
from mcm_tasks.controllers.problems_io import answers_unreadable
from mcm_tasks.kinds import Queue
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe
from mcm_tasks.kube.events import NORMAL, WARNING
from mcm_tasks.queue import Requeue, expectations
from mcm_tasks.settings import get_settings

log = logging.getLogger(__name__)

INVALID_REASON: Final = "ValidationFailed"
INVALID_DELETION_ORDER_REASON: Final = "InvalidDeletionOrder"
REPLACING_MARKED_REASON: Final = "ReplacingMarkedMachine"
CLASS_NOT_FOUND_REASON: Final = "MachineClassNotFound"
AUTO_PRESERVATION_STOPPED_REASON: Final = "AutoPreservationStopped"


class ManageReplicasError(RuntimeError):
    """manageReplicas failed; raised after the status was written, so the key backs off."""


# --- reads -----------------------------------------------------------------------------------------------


def get_machine_set(api: ApiClient, name: str, namespace: str) -> MachineSet | None:
    return get_object(
        get_listers().machine_sets, api, kinds.MACHINE_SET.resource, MachineSet, name, namespace
    )


def _read(key: str) -> MachineSet | None:
    """The set a pass over ``key`` is about, read before its scope is built (with the process's
    client and settings); from the API server while the mirror lags (``get_pass_object``): its
    deployment may have scaled it and woken this pass before the watch brought the change."""
    settings = get_settings()
    namespace, name = split_key(key)
    return get_pass_object(
        get_listers().machine_sets,
        context_io.control_api(),
        kinds.MACHINE_SET.resource,
        MachineSet,
        name,
        namespace or settings.namespace,
        lagging=mirror_lagging(settings),
    )


def set_view(raw: dict[str, Any]) -> Machine:
    """A machine as the set's pass reads it: without ``status.conditions``, the Node's conditions
    that the machine controller copies onto the machine (four or more, each with two timestamps),
    which no decision of the set reads and which are most of what parsing a Running machine
    costs. A model parsed this way is read, never written back whole: the set's writes are patches
    and fresh reads (``claim``, ``propagate``, ``auto_preserve``, ``mark_terminating`` with the
    DELETE's answer). A machine whose conditions alone our model refuses is counted by its set (its
    own reconcile answers it as ``Unreadable``), not replaced."""
    status = raw.get("status")
    if isinstance(status, dict) and "conditions" in status:
        raw = {**raw, "status": {k: v for k, v in status.items() if k != "conditions"}}
    return parse_object(Machine, raw)


def facts_reader(machine_set: MachineSet) -> FactsOf:
    """Each machine's ``SetFacts`` for ``machine_set``, kept with the machine in the process's
    parsed-object cache: a machine read shared (``Lister.shared``) is decided once per version and
    set, and looked up on every later pass; any other (a fresh read, a write's answer) once per
    reader. A reader is for one pass: it holds the machines it was asked about."""
    cache = get_parsed_cache()
    name = set_identity(machine_set)
    # two dicts keyed by id, not one of (machine, facts) pairs: a pair is an object the cyclic
    # garbage collector tracks, and a pass over 10 000 machines made 20 000 of them: 26 collections
    # a pass, and the survivors fed the full ones, which walk every object the worker holds
    held: dict[int, Machine] = {}
    seen: dict[int, SetFacts] = {}

    def decide(machine: Machine) -> SetFacts:
        return facts_of(machine, machine_set)

    def read(machine: Machine) -> SetFacts:
        ident = id(machine)
        if held.get(ident) is machine:
            return seen[ident]
        found: SetFacts = cache.derived(machine, name, decide)
        held[ident], seen[ident] = machine, found
        return found

    return read


def candidate_machines(
    scope: MachineSetScope, *, live: bool = False, read: FactsOf | None = None
) -> list[Machine]:
    """The machines the set controls, and the orphans its selector picks (adoption candidates), read
    through the pass's listers and client (so a test hands it in-memory ones).

    From the mirror, the models are the process's shared ones (``Lister.shared``) in the set's view
    (``set_view``): a machine whose stored JSON has not changed since an earlier pass is not parsed
    again (parsing grows with the set, its decisions need it only for what changed). They are
    read-only here, as
    everywhere in this controller (writes build patches; what the API server returns is parsed
    afresh). The synced check and the list are one read, so an emptied mirror never reads as "no
    machines". Without the mirror, or ``live`` (the evidence that ends a dead pass's expectations),
    a list from the API server. ``read``: the pass's facts reader (``facts_reader``), so that the
    claim and the census that follow find each machine's facts in it instead of looking them up in
    the cache again (a dict lookup less per machine and use, at 10 000 machines a pass).
    """
    machine_set = scope.machine_set
    listed = None if live else replace(scope.listers.machines.shared, parse=set_view).list_if_synced()
    if listed is None:
        raws = ops.list_(scope.api, kinds.MACHINE.resource, machine_set.metadata.namespace)["items"]
        listed = [Machine.model_validate(raw) for raw in raws if _is_candidate_raw(raw, machine_set)]
    read = read or facts_reader(machine_set)
    return [m for m in listed if read(m).candidate]


def _is_candidate_raw(raw: dict[str, Any], machine_set: MachineSet) -> bool:
    """``SetFacts.candidate`` on a stored dict, so that a live list parses only the candidates."""
    meta = raw.get("metadata")
    if not isinstance(meta, dict) or meta.get("namespace") != machine_set.metadata.namespace:
        return False
    controller = next((ref for ref in meta.get("ownerReferences") or () if ref.get("controller")), None)
    if controller is not None:
        return bool(controller.get("uid") == machine_set.metadata.uid)
    return selects(machine_set.spec.selector, meta.get("labels") or {})


# --- finalizers ------------------------------------------------------------------------------------------


def set_finalizer(scope: MachineSetScope, present: bool) -> MachineSet:
    """Add or remove MCM's finalizer with a resourceVersion-guarded patch (fresh read on Conflict); the
    pass carries on with the set as written.

    Upstream: ``addMachineSetFinalizers``, ``deleteMachineSetFinalizers``.
    """
    api = scope.api
    current = [scope.machine_set]

    def attempt() -> MachineSet:
        obj = current[0]
        if obj.metadata.has_finalizer(MCM_FINALIZER) == present:
            return obj
        finalizers = with_finalizer(obj.metadata.finalizers, MCM_FINALIZER, present)
        body = {
            "metadata": {"finalizers": finalizers or None, "resourceVersion": obj.metadata.resource_version}
        }
        try:
            written = ops.patch(
                api, kinds.MACHINE_SET.resource, obj.metadata.name or "", body, obj.metadata.namespace
            )
        except Exception as err:
            status_io.reread_on_conflict(api, current, err)
            raise
        return MachineSet.model_validate(written)

    scope.machine_set = ops.retry_on_conflict(attempt)
    return scope.machine_set


# --- the reconcile ---------------------------------------------------------------------------------------


def machine_set_pass(scope: MachineSetScope) -> Requeue | None:
    """One pass of upstream ``reconcileClusterMachineSet`` over the set its scope read."""
    key, settings, api = scope.key, scope.settings, scope.api
    machine_set = scope.machine_set
    problems = validate_machine_set(machine_set)
    if problems:
        message = "; ".join(str(p) for p in problems)
        log.warning("MachineSet %s is invalid, skipped: %s", key, message)
        scope.recorder.event(machine_set, WARNING, INVALID_REASON, message)
        # said on the status too (cleared by the first valid pass, which recomputes ReplicaFailure)
        invalid = status.ReplicaFailure(INVALID_REASON, message)
        status_io.update_machine_set_status(
            api, machine_set, lambda ms: status.with_failure(ms.status, invalid, scope.clock())
        )
        return None

    deleting = machine_set.metadata.is_deleting
    if not deleting:
        machine_set = set_finalizer(scope, True)
        _warn_missing_class(scope)

    # before the list, as upstream (client-go's rule): a creation observed after the list must not
    # make a list without it look trusted (a scale-up of a thousand overshot by a burst that way).
    # Expectations an earlier pass left open (it died mid-creation) end on evidence: this pass reads
    # the set's machines from the API server, which holds whatever that pass created, and drops them.
    # While the mirror lags (issue 29), the machines are read from the API server too: a machine pass
    # that wrote a new phase woke this one before the watch brought it. Such a list, taken after the
    # earlier pass issued its writes (its record closed), holds its creations and deletions: pending
    # expectations end on it as a dead pass's do, instead of waiting for the lagging watch.
    state = expectations.state_for_pass(key)
    lagging = mirror_lagging(settings)
    live = state is expectations.PassState.ABANDONED or lagging
    satisfied = state is not expectations.PassState.PENDING or lagging
    facts = facts_reader(machine_set)
    claim = claim_children(
        api, kinds.MACHINE.resource, Machine, machine_set, machine_set.spec.selector,
        candidate_machines(scope, live=live, read=facts),
        recheck_owner(api, kinds.MACHINE_SET.resource, machine_set),
        decide=lambda m: facts(m).claim,
    )  # fmt: skip
    if state is expectations.PassState.ABANDONED:
        log.info("MachineSet %s: a pass died mid-way; its expectations end on a live list", key)
        expectations.delete_expectations(key)
    elif state is expectations.PassState.PENDING and lagging:
        log.debug("MachineSet %s: the mirror lags; its expectations end on a live list", key)
        expectations.delete_expectations(key)
    if claim.adopted or claim.released:
        log.info("MachineSet %s: adopted %s, released %s", key, claim.adopted, claim.released)
    if claim.errors:
        raise claim.errors[0]
    machines = propagate(api, machine_set, claim.claimed)

    failure: status.ReplicaFailure | None = None
    requeue = Requeue.long()
    #: the census of the final ``machines`` per set identity (``facts.set_identity``)
    censuses: dict[str, Census] = {}
    if not deleting:
        machines = auto_preserve(scope, machines, facts)
        census = censuses[set_identity(machine_set)] = census_of(machines, facts)
        requeue = preservation_wake_up(list(census.expiring), scope.clock()) or requeue
        if satisfied:
            node_values, unread = failed_machines_node_values(scope.target, list(census.failed))
            failure, recheck_in = manage_replicas(scope, machines, node_values, unread, census)
            if unread:  # the Failed machines kept for want of their Node are decided again soon
                requeue = Requeue.short()
            if recheck_in is not None:  # a machine marked for deletion comes of age (MCM #1078)
                requeue = Requeue(after=min(requeue.after, recheck_in + 0.05))
        else:
            log.debug("MachineSet %s: waiting for earlier creations/deletions to show in the cache", key)
            # back when they expire, unless observed first (the informer's events wake the set)
            expires = expectations.expires_in(key)
            wait = settings.expectations_timeout if expires is None else expires + 0.05
            requeue = Requeue(after=min(wait, settings.long_retry))
    elif not machines:
        machine_set = set_finalizer(scope, False)
    elif machine_set.metadata.has_finalizer(MCM_FINALIZER):
        done = control_io.terminate_machines(scope, machine_set, machines, expect=False)
        if done.error is not None:
            log.warning("MachineSet %s: deleting its machines: %s", key, describe(done.error))
        if done.changed:  # decided again on a fresh read
            requeue = Requeue(settings.conflict_retry)

    # as last read or written in the pass: a scale reads the set live first (``_confirm_live``)
    machine_set = scope.machine_set
    now = scope.clock()

    def compute(ms: MachineSet) -> status.MachineSetStatus:
        identity = set_identity(ms)  # a set read again on a Conflict may have changed
        found = censuses.get(identity)
        if found is None:
            found = censuses[identity] = census_of(machines, facts_reader(ms))
        computed = status.calculate_status(ms, machines, failure, now, found)
        return scaling_conditions(ms, computed, machines, now, found)

    written = status_io.update_machine_set_status(api, machine_set, compute)
    if written is not None and written is not machine_set:
        wake(
            settings, _deployment_items(written)
        )  # while the mirror lags: its deployment reads the new counts
    if written is not None and written is not machine_set and written.status.failed_machines:
        # failedMachines is kept until the set is back to all-ready *as its status last said*: settled
        # here against the status just written, since that write's echo does not wake the set
        # (``watches.wakes_machine_set``)
        status_io.update_machine_set_status(api, written, compute)
    if failure is not None:
        raise ManageReplicasError(f"MachineSet {key}: {failure.reason}: {failure.message}")
    return requeue


#: the ``machineset`` queue's reconciler: the set's scope (``MachineSetScope``), then
#: ``machine_set_pass``; a set gone takes its expectations with it
reconcile_machine_set = spaced(
    answers_unreadable(
        scoped(_read, machine_set_pass, MachineSetScope.begin, gone=expectations.delete_expectations)
    )
)


def _deployment_items(machine_set: MachineSet) -> list[tuple[Queue, str]]:
    ref = machine_set.metadata.controller_ref()
    if ref is None or ref.kind != "MachineDeployment" or not ref.name:
        return []
    return [(Queue.MACHINE_DEPLOYMENT, f"{machine_set.metadata.namespace}/{ref.name}")]


def auto_preserve(
    scope: MachineSetScope, machines: list[Machine], facts: FactsOf | None = None
) -> list[Machine]:
    """Upstream's ``manageAutoPreservationOfFailedMachines``: annotate Failed machines
    ``auto-preserved`` up to ``autoPreserveFailedMachineMax`` (the machine controller preserves
    them), or take the annotation off the oldest when there are more than it allows now (the
    maximum lowered, or the set's deployment being rolled out: upstream MCM #1137). Returns the
    machines as they are now."""
    api, machine_set = scope.api, scope.machine_set
    maximum = machine_set.spec.auto_preserve_failed_machine_max or 0
    read = facts or facts_reader(machine_set)
    if maximum <= 0 and not any(read(m).auto_preserved for m in machines):
        return machines
    count, now = machine_set.status.auto_preserve_failed_machine_count, scope.clock()
    plan = preservation.manage_auto_preservation(machines, maximum, count, now)
    # the sibling sets are read only when the answer can change what this pass does
    some = bool(plan.preserve) or any(preservation.is_auto_preserved(m) for m in machines)
    rolling_out = maximum > 0 and some and _rolling_out(scope)
    if rolling_out:
        plan = preservation.manage_auto_preservation(machines, maximum, count, now, rolling_out=True)
    written: dict[str, Machine] = {}
    for machine, value in [(m, PRESERVE_AUTO_PRESERVED) for m in plan.preserve] + [
        (m, None) for m in plan.unpreserve
    ]:
        name = machine.metadata.name or ""
        body = {
            "metadata": {
                "annotations": {PRESERVE_ANNOTATION: value},
                "resourceVersion": machine.metadata.resource_version,
            }
        }
        try:
            raw = ops.patch(api, kinds.MACHINE.resource, name, body, machine.metadata.namespace)
        except ApiException as err:
            log.warning("MachineSet %s: auto-preservation of %s: %s", machine_set.key, name, describe(err))
            continue
        written[name] = Machine.model_validate(raw)
        if value is not None:
            log.info("MachineSet %s: machine %s auto-preserved", machine_set.key, name)
            continue
        why = (
            "its MachineDeployment is being rolled out"
            if rolling_out
            else f"autoPreserveFailedMachineMax is {maximum}"
        )
        message = f"Auto-preservation of machine {name} stopped: {why}"
        log.info("MachineSet %s: %s", machine_set.key, message)
        scope.recorder.event(machine_set, NORMAL, AUTO_PRESERVATION_STOPPED_REASON, message)
    return [written.get(m.metadata.name or "", m) for m in machines]


def _rolling_out(scope: MachineSetScope) -> bool:
    """Whether the set's deployment is being rolled out (``preservation.is_rolling_out``), from
    the other sets of the namespace; a set no deployment controls needs no read."""
    machine_set = scope.machine_set
    if machine_set.metadata.controller_ref() is None:
        return False
    raws = list_objects(
        scope.listers.machine_sets, scope.api, kinds.MACHINE_SET.resource, machine_set.metadata.namespace
    )
    siblings = []
    for raw in raws:
        try:
            siblings.append(parse_object(MachineSet, raw))
        except Unreadable:
            continue
    return preservation.is_rolling_out(machine_set, siblings)


def preservation_wake_up(machines: list[Machine], now: datetime) -> Requeue | None:
    """Come back when the first preservation expires: its machine is replaced then."""
    expiries = [
        m.status.current_status.preserve_expiry_time
        for m in machines
        if m.status.current_status.preserve_expiry_time is not None and preservation.is_preserved(m, now)
    ]
    if not expiries:
        return None
    first = min(e for e in expiries if e is not None)
    return Requeue(max(0.0, (first - now).total_seconds()) + 0.5)


def failed_machines_node_values(
    target: ApiClient | None, machines: list[Machine]
) -> tuple[dict[str, str], set[str]]:
    """The preserve annotation of the Node of each Failed machine (upstream's
    ``findEffectivePreserveValue`` reads it from the node lister): machine name → the Node's value
    ("" when it has none), for the machines whose Node exists; and the machines whose Node could not
    be read. Only Failed machines are read: they are the only ones the value decides for."""
    values: dict[str, str] = {}
    unread: set[str] = set()
    for machine in machines:
        node_name = machine.metadata.labels.get(NODE_LABEL_KEY, "")
        if not node_name or not is_failed(machine) or is_terminating(machine):
            continue
        name = machine.metadata.name or ""
        try:
            node = get_node(target, node_name)
        except Exception as err:  # a read that fails keeps the machine for this pass
            log.warning("machine %s: reading its Node %s: %s", name, node_name, describe(err))
            unread.add(name)
            continue
        if node is not None:
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            values[name] = str(annotations.get(PRESERVE_ANNOTATION, ""))
    return values, unread


def _warn_missing_class(scope: MachineSetScope) -> None:
    """Not in MCM: a set whose template names a class that does not exist still creates its machines
    (the class may be on its way), but says on itself why they will not come up."""
    machine_set = scope.machine_set
    class_name = machine_set.spec.template.spec.class_.name
    lister = scope.listers.machine_classes
    if not class_name or not mirror_has(lister):
        return
    try:
        found = lister.raw.get(class_name, machine_set.metadata.namespace)
    except Exception:  # a read that fails here only costs the hint
        return
    if found is None:
        message = f"MachineClass {class_name} not found: the machines of this set wait for it"
        scope.recorder.event(machine_set, WARNING, CLASS_NOT_FOUND_REASON, message)


def deletion_order(scope: MachineSetScope) -> DeletionOrder | None:
    """The set's ``mcm-tasks.io/deletion-order`` (its deployment's first); an invalid value is told by a
    Warning Event on the set and upstream's order is kept."""
    raw = set_setting(scope.api, scope.machine_set, DELETION_ORDER_ANNOTATION, scope.settings.namespace)
    try:
        return deletion_order_of(raw)
    except ValueError as err:
        scope.recorder.event(
            scope.machine_set, WARNING, INVALID_DELETION_ORDER_REASON, f"{err}; upstream's order kept"
        )
        return None


def manage_replicas(
    scope: MachineSetScope,
    machines: list[Machine],
    node_values: dict[str, str] | None = None,
    unread: set[str] | None = None,
    census: Census | None = None,
) -> tuple[status.ReplicaFailure | None, float | None]:
    """Upstream's ``manageReplicas``: carry out this pass's plan; the failure to report, if any, and
    when a machine marked for deletion comes of age (``replicas.marked_without_replica_change``).
    ``node_values`` and ``unread``: the preserve annotations of the Failed machines' Nodes, and the
    Failed machines whose Node could not be read (``failed_machines_node_values``). A plan that
    creates machines, or deletes them as beyond the replicas, is checked against the API server
    first (``_confirm_live``)."""

    def plan_on(machine_set: MachineSet, these: list[Machine], known: Census | None) -> ReplicaPlan:
        return plan_replicas(
            machine_set,
            these,
            scope.clock(),
            node_values,
            unread or set(),
            order=deletion_order(scope),
            marked_grace=scope.settings.short_retry,
            census=known,
        )

    plan = plan_on(scope.machine_set, machines, census)
    if plan.create or (plan.diff > 0 and plan.delete):
        plan = _confirm_live(scope, machines, plan, plan_on)
    failure, changed = _carry_out(scope, plan)
    if changed:  # machines that changed since read were left: decided again on a fresh read
        retry = scope.settings.conflict_retry
        return failure, retry if plan.recheck_in is None else min(plan.recheck_in, retry)
    return failure, plan.recheck_in


def _confirm_live(
    scope: MachineSetScope,
    machines: list[Machine],
    plan: ReplicaPlan,
    plan_on: Callable[[MachineSet, list[Machine], Census | None], ReplicaPlan],
) -> ReplicaPlan:
    """A plan that creates machines, or deletes them as beyond the set's replicas, made again on what
    the API server says when the mirror's may be behind it: the set read live (``_live_set``) and,
    for an old set of an in-place update (scale-up disabled, its machines moving to the new set)
    about to delete, the machines it still controls listed live (``_controlled_live``)."""
    live = _live_set(scope)
    if live is not None and live.metadata.resource_version != scope.machine_set.metadata.resource_version:
        # the mirror's set is older than the machines it was read with: plan again on the live one
        scope.machine_set = live
        plan = plan_on(live, machines, None)
    moving = SCALE_UP_DISABLED_LABEL_KEY in scope.machine_set.metadata.labels
    if not (moving and plan.diff > 0 and plan.delete):
        return plan
    controlled = _controlled_live(scope)
    if controlled is None:
        return plan
    staying = [m for m in machines if (m.metadata.name or "") in controlled]
    if len(staying) == len(machines):
        return plan
    log.info("MachineSet %s: %d machines moved to another set since the mirror's read; counted without them",
             scope.key, len(machines) - len(staying))  # fmt: skip
    return plan_on(scope.machine_set, staying, None)


def _controlled_live(scope: MachineSetScope) -> set[str] | None:
    """The names of the machines the set controls, from the API server (None: unreadable, and the
    mirror's count stands).

    An in-place update's deployment moves a machine to the new set, then scales its old set down.
    A pass of the old set that reads the set after the scale-down and the machine before its move
    (two watches) counts one machine too many; the moved one's DELETE would be refused (it is
    guarded by the version the pass read), but the deletion order may pick one of the set's own
    machines instead, which has not changed and would go. One LIST by the set's labels, on an old
    set's passes that delete by count only."""
    ms = scope.machine_set
    labels = ms.spec.selector.match_labels if ms.spec.selector else {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None
    try:
        raws = ops.list_(scope.api, kinds.MACHINE.resource, ms.metadata.namespace, label_selector=selector)
    except Exception as err:
        log.warning("MachineSet %s: machines not listed before a scale-down: %s", scope.key, describe(err))
        return None
    uid = ms.metadata.uid
    return {
        str(meta.get("name"))
        for meta in (raw["metadata"] for raw in raws.get("items") or ())
        if any(ref.get("controller") and ref.get("uid") == uid for ref in meta.get("ownerReferences") or ())
    }


def _live_set(scope: MachineSetScope) -> MachineSet | None:
    """The set from the API server, read before machines are created, or deleted as beyond its
    replicas (None: gone, or unreadable, and the pass's own read stands).

    The set and its machines come through two watches, and either may be ahead in the mirror. An
    in-place update's deployment raises the new set's replicas for a machine it moved in, then
    takes the machine's ``update-result`` label off (the label holds the set still, ``plan_replicas``);
    a pass that reads the machine without the label and the set before its raise counts one machine
    too many, and would delete a machine that was just updated in place. Likewise an old set that
    sees a machine gone to the new set before its own ``scale-up-disabled`` label and scale-down
    would create a machine of the old template in its place. The API server's set holds both (they
    were written first), so the plan is made on it. One GET, on passes that create or delete by count
    only (a scale's few), never on an idle recheck."""
    ms = scope.machine_set
    try:
        raw = ops.get(scope.api, kinds.MACHINE_SET.resource, ms.metadata.name or "", ms.metadata.namespace,
                      missing_ok=True)  # fmt: skip
    except Exception as err:
        log.warning("MachineSet %s: not read before a scale: %s", scope.key, describe(err))
        return None
    return MachineSet.model_validate(raw) if raw else None


def _deployment_rolls(scope: MachineSetScope) -> bool:
    """Whether the set's deployment rolls (``spacing.rolling``), from the mirror's sets by owner;
    not read while no floor is raised (``--machine-set-recount-interval`` 0)."""
    ref = scope.machine_set.metadata.controller_ref()
    if ref is None or not ref.uid or scope.settings.machine_set_recount_interval <= 0:
        return False
    return spacing.rolling(scope.machine_set, scope.listers.machine_sets.shared.by_index(BY_OWNER, ref.uid))


def _carry_out(scope: MachineSetScope, plan: ReplicaPlan) -> tuple[status.ReplicaFailure | None, bool]:
    """The plan carried out: the failure to report, and whether a machine to delete was left
    because it changed since the pass read it (``control_io.terminate_machines``)."""
    machine_set, key = scope.machine_set, scope.key
    if plan.skipped:
        level = logging.INFO if plan.skipped == SKIP_FROZEN else logging.DEBUG
        log.log(
            level, "MachineSet %s: %d machines missing, scale-up blocked (%s)", key, -plan.diff, plan.skipped
        )
        return None, False
    if plan.create or plan.delete:
        spacing_io.acted()  # the next pass is not held back (spacing_io)
    elif _deployment_rolls(scope):
        spacing_io.deployment_rolls()  # its recounts are not floored (spacing)
    if plan.create:
        log.info("MachineSet %s: too few replicas (need %d), creating %d",
                 key, machine_set.spec.replicas, plan.create)  # fmt: skip
        _, error = control_io.create_machines(scope, machine_set, plan.create)
        if error is not None:
            return status.ReplicaFailure(status.FAILED_CREATE, describe(error)), False
        return None, False
    for machine in plan.replacing:
        marked = machine.metadata.annotations.get(MARKED_FOR_DELETION_TIME_ANNOTATION, "")
        message = (
            f"Replacing machine {machine.metadata.name}: marked for deletion (priority 1) at {marked[:40]} "
            "and no replica change accounts for it (MCM #1078)"
        )
        scope.recorder.event(machine_set, NORMAL, REPLACING_MARKED_REASON, message)
    if plan.delete:
        log.info("MachineSet %s: deleting %d machines (replicas %d): %s", key, len(plan.delete),
                 machine_set.spec.replicas, [m.metadata.name for m in plan.delete])  # fmt: skip
        done = control_io.terminate_machines(scope, machine_set, plan.delete)
        if done.error is not None:
            return status.ReplicaFailure(status.FAILED_DELETE, describe(done.error)), done.changed > 0
        return None, done.changed > 0
    return None, False
