"""``admin held`` / ``admin release``: the machines a node-deletion storm holds (issue 29), and the
operator's word that ends a hold.

``held`` lists the machines carrying ``mcm-tasks.io/held`` (read from the control cluster, so it is
true even while the mirror catches up). ``release deployment/<name>`` (or ``machine/<name>``) ends
the hold of those machines: the hold's annotation and condition go, the machine gets
``mcm-tasks.io/node-deletion-released`` so that the loss of its Node no longer deletes it, and its
fate is its health check's again (Unknown, then Failed within the remediation budgets, unless its
Node registers again first). Nothing is deleted by a release. Each released machine is enqueued so
its controller acts on the change at once.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from mcm_tasks.admin.keys import NotFound
from mcm_tasks.api import Machine
from mcm_tasks.api.constants import HELD_ANNOTATION, MACHINE_DEPLOYMENT_NAME_LABEL_KEY, NODE_LABEL_KEY
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.controllers.machine.storm import HELD_CONDITION, HOLD_RELEASED, is_held
from mcm_tasks.kinds import MACHINE, MACHINE_DEPLOYMENT, Queue
from mcm_tasks.kube import ops
from mcm_tasks.kube.clients import get_clusters
from mcm_tasks.queue import enqueue
from mcm_tasks.settings import get_settings


class Held(BaseModel):
    namespace: str
    machine: str
    deployment: str
    node: str
    reason: str
    since: str
    message: str


def _held(machine: Machine) -> Held:
    condition = next((c for c in machine.status.conditions if c.type == HELD_CONDITION), None)
    since = condition.last_transition_time.isoformat() if condition and condition.last_transition_time else ""
    return Held(
        namespace=machine.metadata.namespace or "",
        machine=machine.metadata.name or "",
        deployment=machine.metadata.labels.get(MACHINE_DEPLOYMENT_NAME_LABEL_KEY, ""),
        node=machine.metadata.labels.get(NODE_LABEL_KEY, ""),
        reason=machine.metadata.annotations.get(HELD_ANNOTATION, ""),
        since=since,
        message=condition.message if condition else "",
    )


def _machines(api: Any, namespace: str, label_selector: str | None = None) -> list[Machine]:
    items = ops.list_(api, MACHINE.resource, namespace, label_selector=label_selector)["items"]
    return [Machine.model_validate(i) for i in items]


def list_held(namespace: str | None = None) -> list[Held]:
    machines = _machines(get_clusters().control.api, namespace or get_settings().namespace)
    return sorted((_held(m) for m in machines if is_held(m)), key=lambda h: (h.deployment, h.machine))


def parse_target(target: str) -> tuple[str, str]:
    """``deployment/<name>`` or ``machine/<name>`` → (kind, name); ValueError otherwise."""
    kind, slash, name = target.partition("/")
    if not slash or kind not in ("deployment", "machine") or not name or "/" in name:
        raise ValueError(f"expected deployment/<name> or machine/<name>, got {target!r}")
    return kind, name


def release(target: str, namespace: str | None = None) -> list[str]:
    """End the hold of a deployment's (or one machine's) held machines; the names released."""
    from mcm_tasks.controllers.machine import storm_io

    kind, name = parse_target(target)
    namespace = namespace or get_settings().namespace
    api = get_clusters().control.api
    if kind == "deployment":
        if ops.get(api, MACHINE_DEPLOYMENT.resource, name, namespace, missing_ok=True) is None:
            raise NotFound(f"no MachineDeployment {namespace}/{name} on the control cluster")
        machines = _machines(api, namespace, f"{MACHINE_DEPLOYMENT_NAME_LABEL_KEY}={name}")
    else:
        found = ops.get(api, MACHINE.resource, name, namespace, missing_ok=True)
        if found is None:
            raise NotFound(f"no Machine {namespace}/{name} on the control cluster")
        machines = [Machine.model_validate(found)]
    released = []
    for machine in machines:
        if not is_held(machine):
            continue
        storm_io.end_hold(
            PassScope.begin(machine.key, machine),
            machine,
            HOLD_RELEASED,
            f"hold released by an operator ({target})",
        )
        released.append(machine.metadata.name or "")
        enqueue(Queue.MACHINE, f"{namespace}/{machine.metadata.name}")
    return sorted(released)
