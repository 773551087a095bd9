"""Drain rules (``MachineDrainRule``, Cluster API's kind, and the pod label ``mcm-tasks.io/drain``):
how each pod a drain would remove is treated, and which of them the drain removes now. Pure.

What a pod gets, first match wins:

1. the pod label ``mcm-tasks.io/drain``: ``skip`` (left on the node) or ``wait-completed`` (never
   evicted; the drain waits until it has finished), for one pod without writing a rule;
2. the first valid rule, by name, that selects the drained machine (``spec.machines``) and the pod
   (``spec.pods``: its labels and its Namespace's labels in the target cluster);
3. no rule: ``Drain`` in order group 0, that is MCM's drain exactly as it was.

``Drain`` pods are removed by order groups, lowest first, each group only once every pod of the
lower groups has gone (``DrainPlan.now``); within a group MCM's own rules hold (pods without volumes
in parallel, pods with volumes one at a time by priority, budgets, retries). ``Skip`` pods stay and
are not waited for. ``WaitCompleted`` pods are never evicted: the drain is not over while one still
runs (neither Succeeded nor Failed), until a forced drain stops waiting for them (they are left, as
``Skip``, and go with the VM). DaemonSet and mirror pods are not in play at all: MCM's selection has
already left them out, and no rule brings them back (an evicted DaemonSet pod comes straight back).

A rule that is not valid (``common.drainrules.problems``) is ignored: the validation job says so on
the rule (``common.drainrules_io.validate_rules``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from mcm_tasks.api.constants import POD_DRAIN_LABEL_KEY, POD_DRAIN_SKIP, POD_DRAIN_WAIT_COMPLETED
from mcm_tasks.api.drainrule import DrainBehavior, MachineDrainRule
from mcm_tasks.api.meta import LabelSelector
from mcm_tasks.controllers.common.drainrules import problems
from mcm_tasks.controllers.machine.drain import select as ds

Pod = Mapping[str, Any]

# --- matching ------------------------------------------------------------------------------------------


def _selects(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    return selector is None or selector.matches(labels)


def applies_to_machine(rule: MachineDrainRule, machine_labels: Mapping[str, str]) -> bool:
    machines = rule.spec.machines
    return not machines or any(_selects(m.selector, machine_labels) for m in machines)


def selects_pod(
    rule: MachineDrainRule, pod_labels: Mapping[str, str], namespace_labels: Mapping[str, str]
) -> bool:
    pods = rule.spec.pods
    return not pods or any(
        _selects(p.selector, pod_labels) and _selects(p.namespace_selector, namespace_labels) for p in pods
    )


def rules_for_machine(
    rules: Sequence[MachineDrainRule], machine_labels: Mapping[str, str]
) -> list[MachineDrainRule]:
    """The valid rules that apply to the machine, by name (the first that selects a pod wins)."""
    usable = [r for r in rules if not problems(r) and applies_to_machine(r, machine_labels)]
    return sorted(usable, key=lambda r: r.metadata.name or "")


def needs_namespaces(rules: Sequence[MachineDrainRule]) -> bool:
    """Whether any rule looks at Namespaces' labels (only then are they read)."""
    return any(p.namespace_selector is not None and not p.namespace_selector.is_empty
               for r in rules for p in r.spec.pods)  # fmt: skip


@dataclass(frozen=True)
class PodRule:
    behavior: DrainBehavior
    order: int = 0
    #: what decided it: ``label``, a rule's name, or "" (MCM's default)
    source: str = ""


DEFAULT: Final = PodRule(DrainBehavior.DRAIN)


def rule_for_pod(
    pod: Pod, rules: Sequence[MachineDrainRule], namespace_labels: Mapping[str, Mapping[str, str]]
) -> PodRule:
    """How one pod is drained (``rules``: ``rules_for_machine``; ``namespace_labels`` by name)."""
    labels: Mapping[str, str] = (pod.get("metadata") or {}).get("labels") or {}
    shortcut = labels.get(POD_DRAIN_LABEL_KEY)
    if shortcut == POD_DRAIN_SKIP:
        return PodRule(DrainBehavior.SKIP, source="label")
    if shortcut == POD_DRAIN_WAIT_COMPLETED:
        return PodRule(DrainBehavior.WAIT_COMPLETED, source="label")
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    ns_labels = namespace_labels.get(namespace, {})
    for rule in rules:
        if selects_pod(rule, labels, ns_labels):
            drain = rule.spec.drain
            order = drain.order or 0 if drain.behavior == DrainBehavior.DRAIN else 0
            return PodRule(DrainBehavior(drain.behavior), order, rule.metadata.name or "")
    return DEFAULT


# --- the plan ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrainPlan:
    """The pods a drain selected (``select.pods_for_deletion``), sorted by the rules."""

    #: ``Drain`` pods of the lowest order group still present: what the drain removes in this round
    now: list[Pod] = field(default_factory=list)
    #: ``Drain`` pods of later groups: removed once ``now`` has gone
    later: list[Pod] = field(default_factory=list)
    #: ``WaitCompleted`` pods still running: the drain is not over while there are any
    waiting: list[Pod] = field(default_factory=list)
    #: pods left on the node: ``Skip``, finished ``WaitCompleted`` ones, all of them once forced
    left: list[Pod] = field(default_factory=list)
    #: the order group being drained (None: no ``Drain`` pod left)
    group: int | None = None

    @property
    def held(self) -> list[Pod]:
        """Pods on the node the drain does not remove in this round (their volumes stay in use)."""
        return [*self.later, *self.waiting, *self.left]

    @property
    def holds_the_drain(self) -> bool:
        """The drain cannot be over in this round, whatever ``now`` does."""
        return bool(self.later or self.waiting)


def plan(
    selected: Sequence[Pod],
    rules: Sequence[MachineDrainRule],
    namespace_labels: Mapping[str, Mapping[str, str]],
    *,
    forced: bool = False,
) -> DrainPlan:
    """Sort the selected pods of a drain by the rules of its machine (``rules_for_machine``); Cluster
    API: ``machineDrainRulesFilter`` and the order groups of ``EvictPods``.

    A forced drain keeps the order groups but waits for no ``WaitCompleted`` pod."""
    draining: list[tuple[int, Pod]] = []
    waiting: list[Pod] = []
    left: list[Pod] = []
    for pod in selected:
        rule = rule_for_pod(pod, rules, namespace_labels)
        if rule.behavior is DrainBehavior.DRAIN:
            draining.append((rule.order, pod))
        elif rule.behavior is DrainBehavior.WAIT_COMPLETED and not forced and not ds.is_finished(pod):
            waiting.append(pod)
        else:
            left.append(pod)
    if not draining:
        return DrainPlan(waiting=waiting, left=left)
    group = min(order for order, _ in draining)
    now = [pod for order, pod in draining if order == group]
    later = [pod for order, pod in draining if order != group]
    return DrainPlan(now=now, later=later, waiting=waiting, left=left, group=group)
