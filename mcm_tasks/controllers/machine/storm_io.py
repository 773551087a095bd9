"""Node-deletion storms' edges (``storm`` decides): the window of deletions per deployment in Redis,
taken by one atomic script so every worker counts the same deletions; the hold written on the
machine (annotation, status condition, lastOperation, Event) and on its deployment (a Warning Event
per window); the hold ended when the Node comes back.

The window is a sorted set of the machines deleted for their Node's loss (score: when). A pass that
dies after admitting a deletion and before deleting leaves its machine in the set: its next pass
finds it there and deletes it, so no admission is lost or counted twice.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineOperationType, MachineState, Obj
from mcm_tasks.api.constants import (
    HELD_ANNOTATION,
    MACHINE_DEPLOYMENT_NAME_LABEL_KEY,
    NODE_DELETION_RELEASED_ANNOTATION,
    NODE_FINALIZER,
)
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.events import recorder
from mcm_tasks.controllers.common.finalizers import finalizers_patch
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.controllers.common.status import last_operation, updated_status
from mcm_tasks.controllers.common.status_io import record_event, update_machine_status
from mcm_tasks.controllers.machine.storm import (
    HOLD_RELEASED,
    NODE_DELETION_STORM,
    NODE_RETURNED,
    held_condition,
    hold_message,
    is_held,
    is_released,
    storm_limit,
    without_held_condition,
)
from mcm_tasks.kube import ops
from mcm_tasks.kube.events import NORMAL, WARNING
from mcm_tasks.redisdb import get_redis, rkey

log = logging.getLogger(__name__)

#: KEYS: the window. ARGV: now, window, limit, machine. 1 = delete it, 0 = hold it; then the count.
_ADMIT: Final = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
if redis.call('ZSCORE', KEYS[1], ARGV[4]) then return {1, redis.call('ZCARD', KEYS[1])} end
local count = redis.call('ZCARD', KEYS[1])
if count < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
  redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])) + 60)
  return {1, count + 1}
end
return {0, count}
"""


def _group(scope: PassScope[Any], machine: Machine) -> tuple[str, str]:
    """(namespace, deployment) whose window the machine counts in; "" for a machine of no deployment
    (they share their namespace's window)."""
    namespace = machine.metadata.namespace or scope.settings.namespace
    return namespace, machine.metadata.labels.get(MACHINE_DEPLOYMENT_NAME_LABEL_KEY, "")


def window_key(namespace: str, deployment: str) -> str:
    return rkey("storm", "node-deletions", f"{namespace}/{deployment}")


def _group_size(scope: PassScope[Any], namespace: str, deployment: str) -> int:
    """What a percentage threshold is of: the deployment's replicas, not its machines now (the
    replacements of the first deletions would raise the limit as the storm goes on); the machines
    of a deployment the mirror does not know; the namespace's machines of no deployment."""
    if deployment:
        found = context_io.get_machine_deployment(scope.api, deployment, namespace)
        if found is not None:
            return found.spec.replicas
        return len(
            context_io.machines_with_label(
                scope.api, MACHINE_DEPLOYMENT_NAME_LABEL_KEY, deployment, namespace
            )
        )
    return sum(
        1
        for m in context_io.machines_in_namespace(scope.api, namespace)
        if not m.metadata.labels.get(MACHINE_DEPLOYMENT_NAME_LABEL_KEY)
    )


def admit(scope: PassScope[Any], machine: Machine) -> tuple[bool, int, int | None]:
    """Whether this machine may be deleted for its Node's loss now: (admitted, deletions in the
    window, the limit or None when the guard is off). A percentage is of the deployment's replicas
    (of the namespace's machines without a deployment, for machines of none)."""
    settings = scope.settings
    namespace, deployment = _group(scope, machine)
    limit = storm_limit(settings.node_deletion_storm_threshold, _group_size(scope, namespace, deployment))
    if limit is None:
        return True, 0, None
    client = get_redis()
    allowed, count = client.eval(
        _ADMIT,
        1,
        window_key(namespace, deployment),
        repr(scope.clock().timestamp()),
        repr(settings.node_deletion_storm_window),
        str(limit),
        machine.metadata.name or "",
    )  # type: ignore[misc]
    return bool(allowed), int(count), limit


def hold(
    scope: PassScope[Any], machine: Machine, node: Obj | None, node_name: str, deleted: int, limit: int
) -> None:
    """Keep the machine: mark it held (annotation, condition, lastOperation, Warning Event), tell its
    deployment once per window, and let its Node object go (its finalizer off) so that a kubelet
    still alive on the VM can register it again."""
    settings = scope.settings
    namespace, deployment = _group(scope, machine)
    name = machine.metadata.name or ""
    message = hold_message(name, node_name, deleted, limit, settings.node_deletion_storm_window, deployment)
    api = scope.api
    patched = ops.patch(
        api,
        kinds.MACHINE.resource,
        name,
        {"metadata": {"annotations": {HELD_ANNOTATION: NODE_DELETION_STORM}}},
        namespace,
    )
    held = Machine.model_validate(patched)
    status = updated_status(
        held,
        last_op=last_operation(
            message, MachineState.PROCESSING, MachineOperationType.HEALTH_CHECK, now=scope.clock()
        ),
        conditions=[*without_held_condition(held.status.conditions), held_condition(message, scope.clock())],
    )
    update_machine_status(scope, held, status, dedup=False)
    record_event(scope.api, held, WARNING, NODE_DELETION_STORM, message)
    log.warning("node-deletion storm: %s", message)
    _tell_deployment(scope, namespace, deployment, deleted, limit)
    release_node(scope, node, node_name)


def _tell_deployment(
    scope: PassScope[Any], namespace: str, deployment: str, deleted: int, limit: int
) -> None:
    """One Warning Event on the deployment per window (a Redis flag that lives as long as it)."""
    if not deployment:
        return
    settings = scope.settings
    flag = rkey("storm", "announced", f"{namespace}/{deployment}")
    if not get_redis().set(flag, "1", nx=True, ex=max(1, int(settings.node_deletion_storm_window))):
        return
    found = context_io.get_machine_deployment(scope.api, deployment, namespace)
    if found is None:
        return
    recorder(scope.api).event(
        found.model_dump(by_alias=True, mode="json"),
        WARNING,
        NODE_DELETION_STORM,
        f"{deleted} machines deleted for the loss of their Nodes within "
        f"{settings.node_deletion_storm_window:g}s (threshold {limit}): the others whose Nodes are deleted "
        f"are held; list them with `mcm-tasks admin held`, release with "
        f"`mcm-tasks admin release deployment/{deployment}`",
    )


def release_node(scope: PassScope[Any], node: Obj | None, node_name: str) -> None:
    """Take the node finalizer off a Node being deleted, so the deletion completes without its VM."""
    target = scope.target
    if node is None or target is None:
        return
    meta = node.get("metadata") or {}
    patch = finalizers_patch(
        list(meta.get("finalizers") or []), meta.get("resourceVersion"), remove=NODE_FINALIZER
    )
    if patch is not None:
        ops.patch(target, kinds.NODE.resource, node_name, patch)


def end_hold(scope: PassScope[Any], machine: Machine, reason: str, message: str) -> Machine:
    """The hold is over (the Node is back, or an operator released it): annotations and condition
    off, a Normal Event. With ``HOLD_RELEASED`` the machine keeps a released mark, so the Node's
    absence no longer deletes it."""
    annotations: dict[str, str | None] = {HELD_ANNOTATION: None}
    if reason == HOLD_RELEASED:
        annotations[NODE_DELETION_RELEASED_ANNOTATION] = scope.clock().isoformat()
    else:
        annotations[NODE_DELETION_RELEASED_ANNOTATION] = None
    api = scope.api
    patched = Machine.model_validate(
        ops.patch(
            api,
            kinds.MACHINE.resource,
            machine.metadata.name or "",
            {"metadata": {"annotations": annotations}},
            machine.metadata.namespace,
        )
    )
    if any(c.type for c in patched.status.conditions if c.reason == NODE_DELETION_STORM):
        status = updated_status(patched, conditions=without_held_condition(patched.status.conditions))
        patched = update_machine_status(scope, patched, status, dedup=False) or patched
    record_event(scope.api, patched, NORMAL, reason, message)
    return patched


def node_returned(scope: PassScope[Any], machine: Machine, node_name: str) -> Machine:
    """The machine's Node is registered again: a held or released machine is ordinary again."""
    if not (is_held(machine) or is_released(machine)):
        return machine
    return end_hold(
        scope, machine, NODE_RETURNED, f"Node {node_name} is back: machine {machine.metadata.name} kept"
    )
