"""The machine controller's preservation step (upstream ``manageMachinePreservation``,
``preserveMachine``, ``stopPreservationIfActive``); the decisions are
``controllers.common.preservation``'s, this module writes them.

Preserving a machine: ``preserveExpiryTime`` (once), the cluster-autoscaler's scale-down protection
on its Node (``scale-down-disabled`` plus ``…-by-mcm``, so that only what MCM added is removed), the
Node condition ``Preserved=True``; and for a Failed machine the ``node.machine.sapcloud.io/preserved``
NoSchedule taint and a drain (every pod but DaemonSet and mirror pods is evicted, a PDB refusal is
retried on the next pass). Stopping undoes all of it; a Failed machine is then replaced by its
MachineSet. Each pass comes back at the expiry at the latest.
"""

from __future__ import annotations

import logging
from datetime import datetime

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachinePhase, Obj, format_time
from mcm_tasks.api.constants import (
    CA_SCALE_DOWN_DISABLED_ANNOTATION,
    CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION,
    CA_SCALE_DOWN_DISABLED_VALUE,
    NODE_LABEL_KEY,
    PRESERVE_ANNOTATION,
    PRESERVED_TAINT,
    TAINT_EFFECT_NO_SCHEDULE,
)
from mcm_tasks.controllers.common import nodecondition_io, status_io
from mcm_tasks.controllers.common import preservation as p
from mcm_tasks.controllers.machine.drain import cluster_io as io
from mcm_tasks.controllers.machine.drain import select as ds
from mcm_tasks.controllers.machine.drain.pods import Answer, Removal
from mcm_tasks.controllers.machine.scope import MachineScope
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import is_not_found
from mcm_tasks.kube.events import NORMAL, WARNING
from mcm_tasks.queue import Requeue

log = logging.getLogger(__name__)


def preserve_timeout(scope: MachineScope, machine: Machine) -> float:
    own = machine.spec.machine_preserve_timeout_seconds
    return own if own is not None else scope.settings.machine_preserve_timeout


def manage_preservation(
    scope: MachineScope, machine: Machine, node: Obj | None
) -> tuple[Machine, Requeue | None]:
    """The preservation step of a machine reconcile, on the machine's ``node`` as the pass read it:
    the machine as it is now, and when to come back (None: nothing is preserved)."""
    if machine.metadata.is_deleting or not machine.status.current_status.phase:
        return machine, None
    api = scope.target
    node_name = machine.metadata.labels.get(NODE_LABEL_KEY, "")
    node = node if node_name and api is not None else None
    node_annotations = _annotations(node) if node is not None else None
    has_expiry = machine.status.current_status.preserve_expiry_time is not None
    _, work = p.annotation_value(node_annotations, machine.metadata.annotations, has_expiry)
    if not work and not _marked(node):
        return machine, None
    now = scope.clock()
    decision = p.decide(machine, node_annotations, now)
    machine = _write_annotations(scope, machine, decision)
    if decision.clear_node_value and node is not None and api is not None:
        _patch_node(api, node, {"metadata": {"annotations": {PRESERVE_ANNOTATION: None}}})
    if decision.action is p.Action.PRESERVE:
        return _preserve(scope, machine, node, api, decision.value, now)
    if decision.action is p.Action.STOP:
        return _stop(scope, machine, node, api, decision.why), None
    return machine, None


def _annotations(obj: Obj | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def _taints(node: Obj) -> list[Obj]:
    return list((node.get("spec") or {}).get("taints") or [])


def _condition(node: Obj) -> Obj | None:
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == p.PRESERVED_CONDITION:
            return dict(condition)
    return None


def _marked(node: Obj | None) -> bool:
    """Whether the Node still carries a mark only a preservation puts there: the preserved taint or
    ``Preserved=True``. Not the autoscaler's ``…-by-mcm`` annotation: a rollout puts the same one on
    every node of a deployment (``annotateNodesBackingMachineSets``), and reading it as a leftover
    preservation made each machine pass take the rollout's protection off again."""
    if node is None:
        return False
    return any(t.get("key") == PRESERVED_TAINT for t in _taints(node)) or (
        (_condition(node) or {}).get("status") == "True"
    )


def _write_annotations(scope: MachineScope, machine: Machine, decision: p.Decision) -> Machine:
    annotations = machine.metadata.annotations
    patch: dict[str, str | None] = {}
    if annotations.get(PRESERVE_ANNOTATION, "") != decision.machine_value:
        patch[PRESERVE_ANNOTATION] = decision.machine_value or None
    if annotations.get(p.LAST_APPLIED_NODE_PRESERVE_ANNOTATION, "") != decision.last_applied:
        patch[p.LAST_APPLIED_NODE_PRESERVE_ANNOTATION] = decision.last_applied or None
    if not patch:
        return machine
    body = {"metadata": {"annotations": patch, "resourceVersion": machine.metadata.resource_version}}
    written = ops.patch(
        scope.api,
        kinds.MACHINE.resource,
        machine.metadata.name or "",
        body,
        machine.metadata.namespace,
    )
    return Machine.model_validate(written)


def _patch_node(api: ApiClient, node: Obj, body: Obj) -> None:
    try:
        ops.patch(api, kinds.NODE.resource, str(node["metadata"]["name"]), body)
    except ApiException as err:
        if not is_not_found(err):
            raise


def _write_condition(api: ApiClient, node: Obj, cond: p.PreservedCondition, now: datetime) -> None:
    nodecondition_io.write(
        api,
        str(node["metadata"]["name"]),
        nodecondition_io.condition(p.PRESERVED_CONDITION, cond.status, cond.reason, cond.message, now),
    )


def _set_marks(api: ApiClient, node: Obj, *, protect: bool, taint: bool) -> None:
    """The autoscaler annotations and the preserved taint, as wanted; one write when anything moves."""
    annotations = _annotations(node)
    body: Obj = {}
    changes: dict[str, str | None] = {}
    if protect and CA_SCALE_DOWN_DISABLED_ANNOTATION not in annotations:
        changes[CA_SCALE_DOWN_DISABLED_ANNOTATION] = CA_SCALE_DOWN_DISABLED_VALUE
        changes[CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION] = CA_SCALE_DOWN_DISABLED_VALUE
    if not protect and CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION in annotations:
        changes[CA_SCALE_DOWN_DISABLED_ANNOTATION] = None
        changes[CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION] = None
    if changes:
        body["metadata"] = {"annotations": changes}
    taints = _taints(node)
    has_taint = any(t.get("key") == PRESERVED_TAINT for t in taints)
    if taint and not has_taint:
        body["spec"] = {"taints": [*taints, {"key": PRESERVED_TAINT, "effect": TAINT_EFFECT_NO_SCHEDULE}]}
    elif not taint and has_taint:
        body["spec"] = {"taints": [t for t in taints if t.get("key") != PRESERVED_TAINT]}
    if body:
        body.setdefault("metadata", {})["resourceVersion"] = node["metadata"].get("resourceVersion")
        _patch_node(api, node, body)


def evict_pods(api: ApiClient, node_name: str) -> int:
    """Evict what a drain removes from the node; the number of pods still to go."""
    return drain_pods(api, node_name)[0]


def drain_pods(api: ApiClient, node_name: str) -> tuple[int, list[str]]:
    """Upstream ``drainPreservedNode``, one round a pass: evict what a drain removes from the node: the
    number of pods still to go, and what refused (a PodDisruptionBudget's 429, an error), one line a
    pod."""
    left, refused = 0, []
    eviction = io.support_eviction(api)  # a cluster without pods/eviction: delete, as the deletion drain
    for pod in ds.pods_for_deletion(io.pods_on_node(api, node_name), node_name):
        if ds.is_terminating(pod) or ds.is_finished(pod):
            continue
        if eviction:
            reply = io.remove_pod(api, pod, Removal.EVICT, eviction)
        else:
            reply = io.remove_pod(api, pod, Removal.DELETE)
        if reply.answer is Answer.NOT_FOUND:
            continue
        left += 1
        if reply.answer in (Answer.TOO_MANY_REQUESTS, Answer.ERROR):
            meta = pod.get("metadata") or {}
            refused.append(f"{meta.get('namespace')}/{meta.get('name')}: {reply.message or reply.answer}")
    return left, refused


def _preserve(
    scope: MachineScope, machine: Machine, node: Obj | None, api: ApiClient | None, value: str, now: datetime
) -> tuple[Machine, Requeue | None]:
    """Upstream ``preserveMachine``: the expiry first (``setPreserveExpiryTimeOnMachine``); then, on the
    Node, the autoscaler's protection, for a Failed machine the preserved taint and a drain until
    the condition says it succeeded (``shouldPreservedNodeBeDrained``), and the ``Preserved``
    condition with the drain's outcome (``computeNewNodePreservedCondition``). A drain whose
    evictions are under way is looked at again shortly; one refused (a PodDisruptionBudget) says so
    on the condition, False, and is retried."""
    current = machine.status.current_status
    expiry = current.preserve_expiry_time
    if expiry is None:
        expiry = p.expiry_for(now, preserve_timeout(scope, machine))
        new = machine.status.model_copy(
            update={"current_status": current.model_copy(update={"preserve_expiry_time": expiry})}
        )
        machine = status_io.update_machine_status(scope, machine, new, dedup=False) or machine
        status_io.record_event(
            scope.api,
            machine,
            NORMAL,
            "MachinePreserved",
            f"Machine preserved ({value}) until {format_time(expiry)}",
        )
        log.info("machine %s: preserved (%s) until %s", machine.key, value, format_time(expiry))
    until = Requeue(max(0.0, (expiry - now).total_seconds()) + 0.5)
    if node is None or api is None:
        return machine, until
    phase = machine.status.current_status.phase
    failed = phase == MachinePhase.FAILED
    _set_marks(api, node, protect=True, taint=failed)
    existing = _condition(node)
    drain_failed, retry = False, until
    if p.should_preserved_node_be_drained(existing, phase):
        left, refused = drain_pods(api, str(node["metadata"]["name"]))
        if left and not refused:
            return machine, Requeue.short()  # evictions under way: the outcome is for a later pass
        drain_failed = bool(refused)
        if refused:
            retry = Requeue.short()
            log.warning("machine %s: preserved node not drained: %s", machine.key, "; ".join(refused))
    cond = p.new_preserved_condition(phase, format_time(expiry), value, drain_failed, existing)
    if cond is not None:
        _write_condition(api, node, cond, now)
        if drain_failed:
            status_io.record_event(scope.api, machine, WARNING, "PreservedNodeDrainFailed", cond.message)
    return machine, retry


def _stop(
    scope: MachineScope, machine: Machine, node: Obj | None, api: ApiClient | None, why: str
) -> Machine:
    """Upstream ``stopPreservationIfActive``: only a preserved machine (an expiry, which is cleared
    last, or a preservation's own mark left on the Node) has anything to undo: the ``Preserved``
    condition False (``Preservation stopped.``, the message says why), the autoscaler's protection
    and the preserved taint; the expiry and the annotations go as ``clearMachinePreserveExpiryTime``
    and ``removePreserveAnnotationOnMachine`` take them. A machine that is not preserved leaves its
    Node alone, so a rollout's scale-down protection stays."""
    current = machine.status.current_status
    preserved = current.preserve_expiry_time is not None or _marked(node)
    if preserved and node is not None and api is not None:
        # the marks first: their write is guarded by the resourceVersion the pass read
        _set_marks(api, node, protect=False, taint=False)
        stopped = p.stopped_condition(why)
        found = _condition(node) or {}
        if (found.get("status"), found.get("reason")) != (stopped.status, stopped.reason):
            _write_condition(api, node, stopped, scope.clock())
    if current.preserve_expiry_time is None:
        return machine
    new = machine.status.model_copy(
        update={"current_status": current.model_copy(update={"preserve_expiry_time": None})}
    )
    written = status_io.update_machine_status(scope, machine, new, dedup=False) or machine
    status_io.record_event(
        scope.api, written, NORMAL, "MachinePreservationStopped", f"Machine preservation stopped: {why}"
    )
    log.info("machine %s: preservation stopped (%s)", machine.key, why)
    return written
