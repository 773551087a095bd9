"""The Node reconcile: a Node's fate follows its Machine's, and the other way round.

- nodes annotated ``not-managed-by-mcm`` (set by the orphan-node sweep) are ignored;
- the machine of a node is the single machine whose ``node`` label names it (MCM's
  ``getMachineFromNode``; no match or several → nothing to do);
- a node that is gone, being deleted, or annotated ``trigger-deletion-by-mcm: "true"`` deletes its
  machine (which then drains and deletes the rest through the deletion flow); a Node lost (gone or
  being deleted, not the annotation) does so within the node-deletion storm guard (``storm``): past
  its threshold the machine is held, and the Node coming back ends the hold;
- otherwise the node carries the node finalizer while its machine is not being deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mcm_tasks import kinds
from mcm_tasks.api import Machine
from mcm_tasks.api.constants import (
    NODE_FINALIZER,
    NOT_MANAGED_BY_MCM_ANNOTATION,
    TRIGGER_DELETION_BY_MCM_ANNOTATION,
)
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.finalizers_io import write_finalizers
from mcm_tasks.controllers.common.registration import scoped
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.controllers.machine import storm, storm_io
from mcm_tasks.controllers.problems_io import answers_unreadable
from mcm_tasks.kube import ops
from mcm_tasks.queue import Requeue

log = logging.getLogger(__name__)


def is_managed(node: Mapping[str, Any]) -> bool:
    return NOT_MANAGED_BY_MCM_ANNOTATION not in ((node.get("metadata") or {}).get("annotations") or {})


def wants_machine_deleted(node: Mapping[str, Any] | None) -> bool:
    if node is None:
        return True
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return (
        bool(meta.get("deletionTimestamp")) or annotations.get(TRIGGER_DELETION_BY_MCM_ANNOTATION) == "true"
    )


def node_pass(scope: PassScope[str]) -> Requeue | None:
    """Upstream: ``reconcileClusterNode``. The scope's object is the queue key: a Node that is gone
    is the case the pass acts on."""
    name = scope.key.rpartition("/")[2]
    target = scope.target
    if target is None:
        return None
    node = context_io.get_node(scope.target, name)
    if node is not None and not is_managed(node):
        return None
    machines = context_io.machines_on_node(scope.api, name)
    if len(machines) != 1:
        if len(machines) > 1:
            log.warning("node %s: %d machines claim it; leaving it alone", name, len(machines))
        return None
    machine = machines[0]
    if wants_machine_deleted(node):
        if machine.metadata.is_deleting:
            return None  # a deletion under way is never stopped
        if node is not None and not (node.get("metadata") or {}).get("deletionTimestamp"):
            _delete_machine(
                scope, machine, name, "asks for it (trigger-deletion-by-mcm)"
            )  # deliberate: no storm
            return None
        _node_lost(scope, machine, node, name)
        return None
    assert node is not None
    machine = storm_io.node_returned(scope, machine, name)
    if not machine.metadata.is_deleting:
        meta = node.get("metadata") or {}
        if not write_finalizers(target, kinds.NODE.resource, name, None, meta, add=NODE_FINALIZER):
            return Requeue.conflict()  # the kubelet keeps writing the Node: decided again soon
    return None


def _node_lost(
    scope: PassScope[Any], machine: Machine, node: Mapping[str, Any] | None, node_name: str
) -> None:
    """The Node is gone or being deleted: delete its machine, within the node-deletion storm guard
    (``storm``): a held machine stays held, a released one is left to its health check."""
    why = "is gone" if node is None else "is being deleted"
    if storm.is_held(machine):
        storm_io.release_node(scope, dict(node) if node is not None else None, node_name)
        return
    if storm.is_released(machine):
        log.info("node %s %s: machine %s was released from a storm hold; kept", node_name, why, machine.key)
        storm_io.release_node(scope, dict(node) if node is not None else None, node_name)
        return
    admitted, deleted, limit = storm_io.admit(scope, machine)
    if admitted or limit is None:
        _delete_machine(scope, machine, node_name, why)
        return
    storm_io.hold(scope, machine, dict(node) if node is not None else None, node_name, deleted, limit)


def _delete_machine(scope: PassScope[Any], machine: Machine, node_name: str, why: str) -> None:
    if machine.metadata.is_deleting:
        return
    log.info("node %s %s: deleting its machine %s", node_name, why, machine.key)
    ops.delete(
        scope.api,
        kinds.MACHINE.resource,
        machine.metadata.name or "",
        machine.metadata.namespace,
        uid=machine.metadata.uid,
        missing_ok=True,
    )


def _key(key: str) -> str:
    return key


#: the ``node`` queue's reconciler: a scope around the key, then ``node_pass``
reconcile_node = answers_unreadable(scoped(_key, node_pass, PassScope.begin))
