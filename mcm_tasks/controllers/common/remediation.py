"""Remediation budgets as pure decisions: may an unhealthy machine be marked Failed now (upstream
``canMarkMachineFailed``, widened), and what the MachineDeployment's ``RemediationAllowed`` condition
should say. ``remediation_io`` reads the inputs and carries the verdicts out.

Three budgets, checked in this order, each able to hold a machine whose health timeout expired:

1. **zone outage** (``--zone-unhealthy-threshold``, default 50 %): machines are grouped by zone across
   every deployment of the namespace; a zone with at least ``ZONE_MIN_MACHINES`` machines of which at
   least the threshold are unhealthy is in an outage, and none of its machines is marked Failed
   (replacing them would only start VMs in the zone that is down, or drain the zones that are up);
2. **unhealthy short-circuit** (``--max-unhealthy`` / ``mcm-tasks.io/max-unhealthy``, off by default):
   above that many Unknown or Failed machines in the deployment, none is marked Failed (Cluster API's
   MachineHealthCheck ``unhealthyLessThanOrEqualTo``; a percentage is of the replicas, rounded down,
   as Cluster API rounds ``maxUnhealthy``);
3. **replacement budget** (``--max-replacements`` / ``mcm-tasks.io/max-replacements``, default 1 as
   MCM's fixed ``maxReplacements``): upstream's count of replacements in flight
   (``replacements_in_flight``) must stay below it; a percentage is of the replicas, rounded up.

Defaults reproduce MCM except the zone rule, which the issue turns on by default: it only ever holds
machines that MCM would have replaced one after another into a zone that is down.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from mcm_tasks.api import Machine, MachinePhase
from mcm_tasks.api.constants import MAX_REPLACEMENTS_ANNOTATION, MAX_UNHEALTHY_ANNOTATION, ZONE_LABEL_KEY
from mcm_tasks.settings import Settings, budget_problem

#: the MachineDeployment condition (ours, under the upstream API's conditions list)
REMEDIATION_ALLOWED: Final = "RemediationAllowed"
TOO_MANY_UNHEALTHY: Final = "TooManyUnhealthy"
ZONE_UNHEALTHY: Final = "ZoneUnhealthy"
#: the reason a machine waits for the replacement budget (in its history, not a condition)
MAX_REPLACEMENTS_REACHED: Final = "MaxReplacementsReached"
#: the condition's reason once holds are over
WITHIN_BUDGET: Final = "WithinBudget"
#: the Warning Event on a deployment whose budget annotation cannot be read
INVALID_BUDGET: Final = "InvalidRemediationBudget"
#: a zone smaller than this is never judged in an outage (one bad machine of two is not an outage)
ZONE_MIN_MACHINES: Final = 3

#: phases of a machine its health check found unhealthy
UNHEALTHY_PHASES: Final = frozenset({MachinePhase.UNKNOWN, MachinePhase.FAILED})
#: phases that do not count as a replacement in flight (meltdown protection)
SETTLED_PHASES: Final = frozenset({MachinePhase.UNKNOWN, MachinePhase.RUNNING})


# --- budgets -----------------------------------------------------------------------------------------------


def resolve_budget(value: str, total: int, *, round_up: bool) -> int | None:
    """``"3"`` → 3, ``"30%"`` of ``total`` rounded up or down; None for an empty value (unset).
    ValueError for anything else."""
    text = value.strip()
    if not text:
        return None
    problem = budget_problem(text)
    if problem:
        raise ValueError(problem)
    if text.endswith("%"):
        scaled = int(text[:-1]) * max(total, 0)
        return -(-scaled // 100) if round_up else scaled // 100
    return int(text)


@dataclass(frozen=True)
class Budgets:
    """A deployment's budgets as machine counts, with what could not be read of its annotations."""

    max_replacements: int
    #: None: the short-circuit is off
    max_unhealthy: int | None
    #: ``annotation: why`` for each annotation that was ignored (the flag applied instead)
    problems: tuple[str, ...] = ()


def deployment_budgets(annotations: Mapping[str, str], replicas: int, settings: Settings) -> Budgets:
    """The annotation wins over the flag; an unreadable annotation is reported and the flag applies."""
    problems: list[str] = []

    def pick(annotation: str, flag: str, round_up: bool) -> int | None:
        raw = annotations.get(annotation)
        if raw is not None:
            try:
                return resolve_budget(raw, replicas, round_up=round_up)
            except ValueError as err:
                problems.append(f"{annotation}: {err}")
        return resolve_budget(flag, replicas, round_up=round_up)

    replacements = pick(MAX_REPLACEMENTS_ANNOTATION, settings.max_replacements, True)
    unhealthy = pick(MAX_UNHEALTHY_ANNOTATION, settings.max_unhealthy, False)
    return Budgets(
        max_replacements=1 if replacements is None else replacements,
        max_unhealthy=unhealthy,
        problems=tuple(problems),
    )


# --- counts ------------------------------------------------------------------------------------------------


def replacements_in_flight(machines: Iterable[Machine], exclude: str = "") -> int:
    """Upstream's count in ``canMarkMachineFailed``: machines of one deployment that are neither
    Running nor Unknown (Terminating ones twice: they are a machine leaving and, soon, one being
    created). A preserved machine (one with a ``preserveExpiryTime``) is not being replaced while it
    is preserved, so its own count is left out, as upstream; a Terminating one still adds the
    replacement that follows it."""
    count = 0
    for m in machines:
        if m.metadata.name == exclude:
            continue
        current = m.status.current_status
        if current.phase in SETTLED_PHASES:
            continue
        if current.preserve_expiry_time is None:
            count += 1
        if current.phase == MachinePhase.TERMINATING:
            count += 1
    return count


def can_mark_machine_failed(machines: Iterable[Machine], name: str, max_replacements: int = 1) -> bool:
    """Upstream: ``canMarkMachineFailed``, with the budget as a parameter instead of the constant 1."""
    return replacements_in_flight(machines, exclude=name) < max_replacements


def is_unhealthy(machine: Machine) -> bool:
    return machine.status.current_status.phase in UNHEALTHY_PHASES


def unhealthy_count(machines: Iterable[Machine]) -> int:
    return sum(1 for m in machines if is_unhealthy(m))


# --- zones -------------------------------------------------------------------------------------------------


def zone_of(node: Mapping[str, Any] | None, class_zone: str = "") -> str:
    """The Node's ``topology.kubernetes.io/zone`` label, else the MachineClass's zone, else ""."""
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    zone = labels.get(ZONE_LABEL_KEY, "") if isinstance(labels, Mapping) else ""
    return str(zone or class_zone or "")


@dataclass(frozen=True)
class ZoneHealth:
    zone: str
    unhealthy: int
    total: int

    @property
    def figures(self) -> str:
        return f"{self.unhealthy}/{self.total}"


def zone_health(machines: Iterable[tuple[Machine, str]]) -> dict[str, ZoneHealth]:
    """Per zone (machines without a zone left out): how many of its machines are unhealthy. Machines
    being deleted are left out: they are leaving the zone either way."""
    totals: dict[str, list[int]] = {}
    for machine, zone in machines:
        if not zone or machine.metadata.is_deleting:
            continue
        entry = totals.setdefault(zone, [0, 0])
        entry[0] += 1 if is_unhealthy(machine) else 0
        entry[1] += 1
    return {z: ZoneHealth(z, unhealthy, total) for z, (unhealthy, total) in totals.items()}


def zone_in_outage(health: ZoneHealth, threshold: str) -> bool:
    """At least ``threshold`` (a number of machines or a share, ``50%``) of a zone of at least
    ``ZONE_MIN_MACHINES`` machines is unhealthy. An empty or zero threshold turns the rule off."""
    text = threshold.strip()
    if not text or health.total < ZONE_MIN_MACHINES:
        return False
    if text.endswith("%"):
        percent = int(text[:-1])
        return percent > 0 and health.unhealthy * 100 >= percent * health.total
    count = int(text)
    return count > 0 and health.unhealthy >= count


def zones_in_outage(health: Mapping[str, ZoneHealth], threshold: str) -> dict[str, ZoneHealth]:
    return {z: h for z, h in health.items() if zone_in_outage(h, threshold)}


# --- the verdicts ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """Whether one machine may be marked Failed now, and if not which budget holds it."""

    allowed: bool
    #: TOO_MANY_UNHEALTHY, ZONE_UNHEALTHY, MAX_REPLACEMENTS_REACHED; "" when allowed
    reason: str = ""
    #: the counts behind the reason: ``7/10``
    figures: str = ""
    message: str = ""

    @property
    def held(self) -> str:
        """The pass's outcome as Flower and ``admin inspect`` show it: ``held: TooManyUnhealthy 7/10``."""
        return "" if self.allowed else f"held: {self.reason} {self.figures}"


def decide_remediation(
    name: str,
    zone: str,
    peers: Iterable[Machine],
    budgets: Budgets,
    outages: Mapping[str, ZoneHealth],
) -> Verdict:
    """Whether the machine ``name`` (its health timeout expired, in ``zone``) may be marked Failed,
    given the machines of its deployment (``peers``), the deployment's budgets and the zones in an
    outage."""
    machines = list(peers)
    if zone and zone in outages:
        outage = outages[zone]
        return Verdict(
            False,
            ZONE_UNHEALTHY,
            outage.figures,
            f"zone {zone} is in an outage ({outage.unhealthy} of {outage.total} machines unhealthy): "
            "its machines are not marked Failed",
        )
    unhealthy = unhealthy_count(machines)
    if budgets.max_unhealthy is not None and unhealthy > budgets.max_unhealthy:
        return Verdict(
            False,
            TOO_MANY_UNHEALTHY,
            f"{unhealthy}/{len(machines)}",
            f"{unhealthy} of {len(machines)} machines are unhealthy, more than max-unhealthy "
            f"{budgets.max_unhealthy}: no machine is marked Failed",
        )
    in_flight = replacements_in_flight(machines, exclude=name)
    if in_flight >= budgets.max_replacements:
        return Verdict(
            False,
            MAX_REPLACEMENTS_REACHED,
            f"{in_flight}/{budgets.max_replacements}",
            f"{in_flight} replacements in flight, max-replacements {budgets.max_replacements}",
        )
    return Verdict(True)


@dataclass(frozen=True)
class ConditionVerdict:
    """What the deployment's ``RemediationAllowed`` condition should say."""

    status: str
    reason: str
    message: str

    @property
    def blocked(self) -> bool:
        return self.status == "False"


def deployment_condition(
    peers: Iterable[Machine],
    budgets: Budgets,
    zones: Mapping[str, str],
    outages: Mapping[str, ZoneHealth],
) -> ConditionVerdict:
    """The deployment's condition from its machines (``zones``: machine name → zone): False with
    ``TooManyUnhealthy`` above the short-circuit, else False with ``ZoneUnhealthy`` naming the zones in
    an outage that hold unhealthy machines of it, else True. A replacement budget reached is no
    block (remediation goes on, one batch after another) and is not reported here."""
    machines = list(peers)
    unhealthy = unhealthy_count(machines)
    if budgets.max_unhealthy is not None and unhealthy > budgets.max_unhealthy:
        return ConditionVerdict(
            "False",
            TOO_MANY_UNHEALTHY,
            f"{unhealthy} of {len(machines)} machines unhealthy, more than max-unhealthy "
            f"{budgets.max_unhealthy}: no machine is marked Failed or drained for its health",
        )
    affected = sorted(
        {zones.get(m.metadata.name or "", "") for m in machines if is_unhealthy(m)} & set(outages)
    )
    if affected:
        parts = ", ".join(f"{z} ({outages[z].unhealthy} of {outages[z].total} unhealthy)" for z in affected)
        return ConditionVerdict(
            "False",
            ZONE_UNHEALTHY,
            f"zone outage: {parts}; machines of {'this zone' if len(affected) == 1 else 'these zones'} "
            "are not marked Failed",
        )
    return ConditionVerdict(
        "True", WITHIN_BUDGET, f"{unhealthy} of {len(machines)} machines unhealthy, within the budgets"
    )
