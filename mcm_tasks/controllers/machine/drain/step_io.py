"""Node drain (upstream ``drainNode``, ``drain.RunDrain``) as one bounded step per reconcile: the "Initiate
node drain" step of the deletion flow calls ``drain_step`` again and again; each call looks at the node,
issues what is due, saves the progress (``state_io``) and says when to come back, until the drain is over.

What a call does, in MCM's order: decide the drain's parameters and whether it is forced
(``force``); set the node's ``Terminating`` condition and cordon it; select the pods
(``select``) and sort them by the machine's drain rules (``rules``: the order group removed in this
round; the pods left, waited for or due later); bring their progress up to date and issue the due
evictions or deletions (``plan``, ``pods``, ``volumes``); conclude. It never sleeps: waits are progress
plus the returned ``wake_in``.

The outcome goes back to the deletion flow, which owns ``lastOperation`` (MCM's descriptions); the
Events about the drain itself (started, succeeded, failed, warnings) are recorded here. A drain with
nothing to evict that succeeds in the pass that started it, unforced, records no Event (``went_unremarked``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks.api import Machine, MachineClass, Obj
from mcm_tasks.api.constants import NODE_TERMINATING_REASON_SCALE_DOWN
from mcm_tasks.controllers.common import drainrules_io, status_io
from mcm_tasks.controllers.machine import metrics
from mcm_tasks.controllers.machine.drain import cluster_io as io
from mcm_tasks.controllers.machine.drain import plan, rules
from mcm_tasks.controllers.machine.drain import pods as dp
from mcm_tasks.controllers.machine.drain import select as ds
from mcm_tasks.controllers.machine.drain.blockers import blockers, blockers_message
from mcm_tasks.controllers.machine.drain.force import DrainParams, drain_params, force_due_in
from mcm_tasks.controllers.machine.drain.outcome import DrainResult, Outcome
from mcm_tasks.controllers.machine.drain.state_io import DrainProgress, DrainStore, state_ttl
from mcm_tasks.controllers.machine.scope import MachineScope
from mcm_tasks.kube.errors import describe
from mcm_tasks.kube.events import NORMAL, WARNING
from mcm_tasks.settings import Settings
from providers.driver import Driver

log = logging.getLogger(__name__)

#: evictions and deletions one reconcile may issue; the rest follow at once in the next one
MAX_REMOVALS_PER_STEP: Final = 50
#: upstream polls pod termination and volume detachment every 5 s; events usually come first
POLL_INTERVAL: Final = 5.0


def timing(settings: Settings) -> dp.Timing:
    return dp.Timing(
        retry_interval=settings.pod_eviction_retry_interval,
        detach_timeout=settings.machine_pv_detach_timeout,
        reattach_timeout=settings.machine_pv_reattach_timeout,
    )


def poll_interval(settings: Settings) -> float:
    """Upstream's 5 s, never slower than the eviction retry interval (compressed in tests)."""
    return min(POLL_INTERVAL, settings.pod_eviction_retry_interval)


def drain_step(
    scope: MachineScope,
    machine_class: MachineClass | None,
    driver: Driver | None,
    store: DrainStore | None = None,
    settings: Settings | None = None,
) -> DrainResult:
    """One reconcile's worth of draining the machine's node: the scope's machine, its Node as the pass
    holds it (and holds it after the condition and the cordon, as the API server answered them).
    ``settings``: the flags as they apply to this machine (its deployment's timeouts), else the process's."""
    machine = scope.machine
    settings = settings or scope.settings
    store = store or DrainStore()
    api = scope.target
    node_name = scope.node_name()
    if not node_name or api is None:
        store.clear(machine.key)
        return DrainResult(Outcome.SKIPPED)
    now_dt = scope.precise_clock()
    now = now_dt.timestamp()
    node = scope.node()
    params = drain_params(machine, node, now_dt, settings)
    progress = store.load(machine.key, machine.metadata.uid or "")
    #: a drain that starts here announces itself (DrainStarted) once it has more to tell than success
    starting: DrainParams | None = None
    if progress is None or progress.node != node_name or (params.force and not progress.force_reason):
        progress = DrainProgress(
            machine_uid=machine.metadata.uid or "",
            node=node_name,
            started_at=now,
            force_reason=params.force_reason,
        )
        starting = params
    before = progress.fingerprint()

    if node is not None:
        try:
            node = _kept(scope, node, io.set_terminating(api, node, _termination_reason(node), now_dt))
        except ApiException as err:
            if not params.force:
                return _finish(
                    scope,
                    machine,
                    machine_class,
                    store,
                    progress,
                    DrainResult(Outcome.CONDITION_FAILED, errors=[describe(err)]),
                    now,
                )
            log.warning(
                "machine %s: Terminating condition not set (%s); the drain is forced, going on",
                machine.key,
                describe(err),
            )
        try:
            node = _kept(scope, node, io.cordon(api, node))
        except ApiException as err:
            result = DrainResult(
                Outcome.FAILED, params.force, [f"cordoning node {node_name}: {describe(err)}"]
            )
            return _finish(scope, machine, machine_class, store, progress, result, now, starting)

    pods = io.pods_on_node(api, node_name)
    by_rules = _rules_plan(scope, api, machine, ds.pods_for_deletion(pods, node_name), params)
    selected = by_rules.now  # the lowest order group of the drain rules (all of them, without rules)
    progress = plan.track(progress, selected, _volume_infos(api, driver, progress, selected, params))
    by_key = {ds.pod_key(p): p for p in selected}
    tracked_pvs = [pv for r in progress.pods.values() for pv in r.pv_names]
    vas = io.volume_attachments(api, node_name, tracked_pvs)
    progress = plan.observe_all(progress, by_key, node, vas, params, timing(settings), now)
    eviction = "" if params.force or not progress.pods else io.support_eviction(api)
    if not params.force and progress.pods and not eviction and starting is not None:
        message = (f"The cluster of node {node_name} serves no pod eviction: its pods are deleted, "
                   "without asking their PodDisruptionBudgets")  # fmt: skip
        status_io.record_event(scope.api, machine, WARNING, "EvictionUnsupported", message)
    budget = _issue_removals(api, progress, by_key, node, params, settings, now, eviction)

    staying = [p for p in pods if ds.node_name_of(p) == node_name and ds.skip_reason(p)] + by_rules.held
    pvs_in_use = [pv for names in io.pv_names_by_pod(api, staying).values() for pv in names]
    conclusion = plan.conclude(
        progress, node, vas, pvs_in_use, params, timing(settings), poll_interval(settings), now
    )
    if conclusion.warnings or not conclusion.done or conclusion.errors or progress.pods:
        _announce(scope, machine, node_name, starting)
        starting = None
    for warning in conclusion.warnings:
        status_io.record_event(scope.api, machine, WARNING, "DrainWarning", warning)
    if not conclusion.done or by_rules.holds_the_drain:
        progress.barrier_since = conclusion.barrier_since
        if progress.fingerprint() != before:
            store.save(machine.key, progress, state_ttl(params.timeout))
        wake = 0.0 if budget <= 0 else conclusion.wake_in
        if conclusion.done:  # held by the rules: a later group, or a pod that must complete first
            wake = 0.0 if by_rules.later else poll_interval(settings)
        due = force_due_in(machine, node, now_dt, settings)
        if due is not None and not params.force:
            wake = min(wake, due + 0.001)
        return DrainResult(
            Outcome.WAITING, params.force, wake_in=wake, holding=_holding(api, progress, by_key)
        )
    outcome = Outcome.FAILED if conclusion.errors else Outcome.SUCCEEDED
    result = DrainResult(outcome, params.force, conclusion.errors)
    return _finish(scope, machine, machine_class, store, progress, result, now, starting)


def _holding(api: ApiClient, progress: DrainProgress, pods: Mapping[str, Mapping[str, Any]]) -> str:
    """What holds the drain, for the ``Deleting`` condition: the refused pods with the budgets that
    refuse them (the mirror's budgets, read only when a pod was refused)."""
    refused = {k.partition("/")[0] for k, p in progress.pods.items() if not p.resolved and p.attempts > 0}
    pdbs = [pdb for namespace in sorted(refused) for pdb in io.pdbs_in(api, namespace)]
    return blockers_message(blockers(progress, pods, pdbs), counted=False)


def _rules_plan(
    scope: MachineScope,
    api: ApiClient,
    machine: Machine,
    selected: Sequence[Mapping[str, Any]],
    params: DrainParams,
) -> rules.DrainPlan:
    """The selected pods sorted by the machine's drain rules (``rules``), read for this round."""
    namespace = machine.metadata.namespace or scope.settings.namespace
    usable = rules.rules_for_machine(drainrules_io.drain_rules(scope, namespace), machine.metadata.labels)
    labels = drainrules_io.namespace_labels(api) if rules.needs_namespaces(usable) else {}
    return rules.plan(selected, usable, labels, forced=params.force)


def _kept(scope: MachineScope, node: Obj, answer: Obj | None) -> Obj:
    """The Node after a write that answered ``answer`` (None: nothing written), held by the pass."""
    if answer is None:
        return node
    scope.node_written(answer)
    return answer


def _termination_reason(node: dict[str, Any]) -> str:
    """Keep the reason a condition already set carries (the deletion flow sets Unhealthy for a Failed
    machine when it starts); otherwise this is a scale-down."""
    found = io.terminating_condition(node)
    return (
        str(found.get("reason") or NODE_TERMINATING_REASON_SCALE_DOWN)
        if found
        else NODE_TERMINATING_REASON_SCALE_DOWN
    )


def _volume_infos(
    api: ApiClient,
    driver: Driver | None,
    progress: DrainProgress,
    selected: Sequence[Mapping[str, Any]],
    params: DrainParams,
) -> dict[str, plan.VolumeInfo]:
    """Volume info for pods with claims about to be tracked; a forced drain waits for no volume."""
    new = plan.untracked(progress, selected)
    if not new or params.force:
        return {}
    names = io.unshared(io.pv_names_by_pod(api, [p for p in selected if ds.has_volumes(p)]))
    out = {}
    for pod in new:
        key = ds.pod_key(pod)
        pv_names, volume_ids = io.volume_ids_of(api, driver, names.get(key, []))
        out[key] = plan.VolumeInfo(tuple(pv_names), tuple(volume_ids))
    return out


def _issue_removals(
    api: ApiClient,
    progress: DrainProgress,
    by_key: Mapping[str, Mapping[str, Any]],
    node: Mapping[str, Any] | None,
    params: DrainParams,
    settings: Settings,
    now: float,
    eviction: str = "policy/v1",
) -> int:
    """Issue due removals until none is due or the budget is spent; returns the budget left. Without
    an ``eviction`` version (``support_eviction``: the cluster has none) a due eviction is a
    deletion, as upstream's ``deleteOrEvictPods`` does without ``attemptEvict``."""
    budget = MAX_REMOVALS_PER_STEP
    pdbs: dict[str, list[Obj]] = {}
    while budget > 0:
        due = plan.due_removals(progress, by_key, node, params, now)[:budget]
        if not due:
            break
        for key, due_removal in due:
            pod = by_key[key]
            removal = due_removal if eviction or due_removal is dp.Removal.DELETE else dp.Removal.DELETE
            reply = io.remove_pod(api, pod, removal, eviction)
            pdb = None
            if reply.answer is dp.Answer.TOO_MANY_REQUESTS:
                namespace = str(pod["metadata"].get("namespace") or "")
                if namespace not in pdbs:
                    pdbs[namespace] = io.pdbs_in(api, namespace)
                pdb = dp.pdb_for_pod(pdbs[namespace], pod)
            record = dp.after_reply(
                progress.pods[key], pod, removal, reply, pdb, params, timing(settings), now
            )
            progress.pods[key] = record
            log.debug("drain %s: %s %s -> %s", progress.node, removal, key, reply.answer)
            budget -= 1
    return budget


def _announce(scope: MachineScope, machine: Machine, node_name: str, starting: DrainParams | None) -> None:
    """DrainStarted, for a drain that started in this pass (``starting``) and has more to tell than
    its success. One that found nothing to evict and concluded in the pass that started it records
    no DrainStarted ("started" would tell nothing the end does not) and, unforced, no DrainSucceeded
    either (``went_unremarked``): two Event writes per machine of a scale-down that tell nothing."""
    if starting is not None:
        _started(scope, machine, node_name, starting)


def _started(scope: MachineScope, machine: Machine, node_name: str, params: DrainParams) -> None:
    if params.force:
        message = f"Force-draining node {node_name}: {params.force_reason}"
    else:
        message = (
            f"Draining node {node_name} (timeout {params.timeout:g}s, "
            f"max evict retries {params.max_evict_retries})"
        )
    status_io.record_event(scope.api, machine, NORMAL, "DrainStarted", message)


def _finish(
    scope: MachineScope,
    machine: Machine,
    machine_class: MachineClass | None,
    store: DrainStore,
    progress: DrainProgress,
    result: DrainResult,
    now: float,
    starting: DrainParams | None = None,
) -> DrainResult:
    store.clear(machine.key)
    node = progress.node
    if result.outcome is not Outcome.SUCCEEDED:
        _announce(scope, machine, node, starting)
    if result.outcome is Outcome.SUCCEEDED:
        if not went_unremarked(result, progress, starting):
            what = "Force drain" if result.forced else "Drain"
            status_io.record_event(
                scope.api, machine, NORMAL, "DrainSucceeded", f"{what} of node {node} successful"
            )
        _observe_duration(machine, machine_class, now - progress.started_at)
    else:
        status_io.record_event(
            scope.api, machine, WARNING, "DrainFailed", f"Drain of node {node} failed: {result.message}"
        )
    return result


def went_unremarked(result: DrainResult, progress: DrainProgress, starting: DrainParams | None) -> bool:
    """A drain that found no pod to evict or delete, was not forced and ended in the pass that started
    it did nothing worth an Event: it records none, as it records no DrainStarted. MCM records no drain
    Event at all; ours tell of drains that moved, waited for or forced pods, and the drain-duration
    metric counts every drain. Upstream ``drainNode`` on an empty node is a cordon and a pod list."""
    return starting is not None and not result.forced and not progress.pods


def _observe_duration(machine: Machine, machine_class: MachineClass | None, seconds: float) -> None:
    metrics.observe_duration("drain", machine, seconds, machine_class)
