"""The remediation budgets' edges for the machine controller: read what ``common.remediation`` decides
on (the deployment's budgets, the machines of its zones), and keep the deployment's
``RemediationAllowed`` condition and Events true.

The condition is written by whichever pass holds the deployment's permit and finds it out of date:
the mark-Failed attempt of a machine whose health timeout expired (it sets False on a hold, True when
remediation may go on), and the health check of a machine of a blocked deployment that changes
phase (a machine re-joining or a replacement joining is how an episode ends when no machine is
waiting to be marked). A Warning Event marks the start of each episode, a Normal one its end.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineDeployment, MachineDeploymentCondition
from mcm_tasks.api.constants import MACHINE_DEPLOYMENT_NAME_LABEL_KEY, NODE_LABEL_KEY
from mcm_tasks.api.meta import get_condition
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.events import recorder
from mcm_tasks.controllers.common.remediation import (
    INVALID_BUDGET,
    REMEDIATION_ALLOWED,
    Budgets,
    ConditionVerdict,
    Verdict,
    ZoneHealth,
    decide_remediation,
    deployment_budgets,
    deployment_condition,
    zone_health,
    zone_of,
    zones_in_outage,
)
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe
from mcm_tasks.kube.events import NORMAL, WARNING

log = logging.getLogger(__name__)

#: the Normal Event when an episode ends
REMEDIATION_RESUMED: Final = "RemediationResumed"


@dataclass
class RemediationView:
    """What one decision reads: the deployment (None if gone), its machines (live), their zones and
    the zones in an outage across the namespace."""

    namespace: str
    name: str
    deployment: MachineDeployment | None
    peers: list[Machine]
    budgets: Budgets
    zones: dict[str, str] = field(default_factory=dict)
    outages: dict[str, ZoneHealth] = field(default_factory=dict)

    def verdict(self, machine_name: str) -> Verdict:
        return decide_remediation(
            machine_name, self.zones.get(machine_name, ""), self.peers, self.budgets, self.outages
        )

    def condition(self) -> ConditionVerdict:
        return deployment_condition(self.peers, self.budgets, self.zones, self.outages)


def _class_zones(scope: PassScope[Any], machines: list[Machine], namespace: str) -> dict[str, str]:
    """MachineClass name → its providerSpec's ``zone`` (the local provider's; "" if none)."""
    out: dict[str, str] = {}
    for m in machines:
        name = m.spec.class_.name
        if name in out:
            continue
        klass = context_io.get_machine_class(scope.api, name, namespace)
        spec = klass.provider_spec if klass is not None else None
        zone = spec.get("zone") if isinstance(spec, dict) else None
        out[name] = zone if isinstance(zone, str) else ""
    return out


def read_view(
    scope: PassScope[Any], namespace: str, deployment_name: str, peers: list[Machine], machine: str = ""
) -> RemediationView:
    """The view of one deployment's remediation (``machine``: the one being decided), ``peers`` read
    live by the caller under its permit. The zone view is read from the mirror: it spans the
    namespace and only needs to be about right; a cached one only ever holds a machine back."""
    settings = scope.settings
    deployment = context_io.get_machine_deployment(scope.api, deployment_name, namespace)
    replicas = deployment.spec.replicas if deployment is not None else len(peers)
    annotations = deployment.metadata.annotations if deployment is not None else {}
    budgets = deployment_budgets(annotations, replicas, settings)
    view = RemediationView(namespace, deployment_name, deployment, peers, budgets)
    if not settings.zone_unhealthy_threshold.strip():
        return view
    for fresh in (False, True):
        zones, health = _namespace_zones(scope, namespace, fresh=fresh)
        view.zones = dict(zones)
        for m in peers:  # a machine the mirror has not seen yet: no zone, not judged by one
            view.zones.setdefault(m.metadata.name or "", "")
        view.outages = zones_in_outage(health, settings.zone_unhealthy_threshold)
        # a cached view may only hold ``machine`` back: one that would let it be marked is read
        # afresh, so a zone that has just gone down is never missed for a cache
        deciding = [machine] if machine else [m.metadata.name or "" for m in peers]
        if any(view.zones.get(name) in view.outages for name in deciding):
            break
    return view


#: how long one process reuses a namespace's zone view: during an outage every held machine of the
#: zone asks for it once per recheck, and it is a list of the namespace's machines and Nodes
ZONE_VIEW_TTL: Final = 3.0
_zone_views: dict[str, tuple[float, dict[str, str], dict[str, ZoneHealth]]] = {}
_zone_lock = threading.Lock()


def _namespace_zones(
    scope: PassScope[Any], namespace: str, *, fresh: bool
) -> tuple[dict[str, str], dict[str, ZoneHealth]]:
    """Machine name → zone, and the health per zone, across the namespace (from the mirror);
    unless ``fresh``, reused for ``ZONE_VIEW_TTL`` within a process (a cache only: nothing is lost
    with the process)."""
    now = time.monotonic()
    with _zone_lock:
        cached = _zone_views.get(namespace)
        if not fresh and cached is not None and now - cached[0] < ZONE_VIEW_TTL:
            return cached[1], cached[2]
    machines = {m.metadata.name or "": m for m in context_io.machines_in_namespace(scope.api, namespace)}
    nodes = {(n.get("metadata") or {}).get("name", ""): n for n in context_io.all_nodes(scope.target)}
    class_zones = _class_zones(scope, list(machines.values()), namespace)
    zones = {
        name: zone_of(
            nodes.get(m.metadata.labels.get(NODE_LABEL_KEY, "")), class_zones.get(m.spec.class_.name, "")
        )
        for name, m in machines.items()
    }
    health = zone_health((m, zones[name]) for name, m in machines.items())
    with _zone_lock:
        _zone_views[namespace] = (now, zones, health)
    return zones, health


def report(scope: PassScope[Any], view: RemediationView) -> None:
    """Bring the deployment's condition up to date with ``view``: written only when its status,
    reason or message changes, and only once a hold has happened (a deployment that was never held
    gets no condition). Events: Warning when a hold starts (or its reason changes), Normal when it
    ends; a budget annotation that cannot be read, a Warning each time it is read (the recorder folds
    repeats)."""
    if view.deployment is None:
        return
    events = recorder(scope.api)
    ref = view.deployment.model_dump(by_alias=True, mode="json")
    for problem in view.budgets.problems:
        events.event(ref, WARNING, INVALID_BUDGET, f"{problem}; the flag's value applies")
    wanted = view.condition()
    current = get_condition(view.deployment.status.conditions, REMEDIATION_ALLOWED)
    if current is None and not wanted.blocked:
        return
    if current is not None and (current.status, current.reason, current.message) == (
        wanted.status,
        wanted.reason,
        wanted.message,
    ):
        return
    now = scope.clock()
    transition = (
        current.last_transition_time if current is not None and current.status == wanted.status else now
    )
    condition = MachineDeploymentCondition(
        type=REMEDIATION_ALLOWED,
        status=wanted.status,
        reason=wanted.reason,
        message=wanted.message,
        last_update_time=now,
        last_transition_time=transition,
    )
    try:
        live = ops.get(
            scope.api,
            kinds.MACHINE_DEPLOYMENT.resource,
            view.name,
            view.namespace,
            missing_ok=True,
        )
        if live is None:
            return
        deployment = MachineDeployment.model_validate(live)
        conditions = [c for c in deployment.status.conditions if c.type != REMEDIATION_ALLOWED] + [condition]
        deployment.status = deployment.status.model_copy(update={"conditions": conditions})
        ops.update_status(scope.api, kinds.MACHINE_DEPLOYMENT.resource, deployment.status_body())
    except Exception as err:  # the next pass that holds the permit tries again
        log.info("MachineDeployment %s/%s: condition %s not written: %s", view.namespace, view.name,
                 REMEDIATION_ALLOWED, describe(err))  # fmt: skip
        return
    episode_starts = wanted.blocked and (
        current is None or current.status != "False" or current.reason != wanted.reason
    )
    if episode_starts:
        events.event(ref, WARNING, wanted.reason, wanted.message)
    elif not wanted.blocked and current is not None and current.status == "False":
        events.event(ref, NORMAL, REMEDIATION_RESUMED, wanted.message)


def is_blocked(scope: PassScope[Any], machine: Machine) -> bool:
    """Whether the machine's deployment (from the mirror) has ``RemediationAllowed=False``: cheap,
    so every phase change of a machine may ask it."""
    name = machine.metadata.labels.get(MACHINE_DEPLOYMENT_NAME_LABEL_KEY, "")
    if not name:
        return False
    deployment = context_io.get_machine_deployment(
        scope.api, name, machine.metadata.namespace or scope.settings.namespace
    )
    if deployment is None:
        return False
    current = get_condition(deployment.status.conditions, REMEDIATION_ALLOWED)
    return current is not None and current.status == "False"
