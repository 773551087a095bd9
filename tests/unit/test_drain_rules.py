"""Drain rules as tables (``machine/drain/rules.py``, ``common/drainrules.py``): which rule a pod gets,
the drain plan by order groups with Skip and WaitCompleted pods, the machine selection, and the
problems of hostile rules."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_tasks.api.drainrule import DrainBehavior, MachineDrainRule
from mcm_tasks.controllers.common.drainrules import problems, summary
from mcm_tasks.controllers.machine.drain import rules as r


def rule(
    name: str,
    behavior: str = "Drain",
    order: int | None = None,
    *,
    machines: list[dict[str, Any]] | None = None,
    pods: list[dict[str, Any]] | None = None,
) -> MachineDrainRule:
    drain: dict[str, Any] = {"behavior": behavior}
    if order is not None:
        drain["order"] = order
    return MachineDrainRule.model_validate(
        {"metadata": {"name": name}, "spec": {"drain": drain, "machines": machines or [], "pods": pods or []}}
    )


def pod(name: str, namespace: str = "default", phase: str = "Running", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"nodeName": "n"},
        "status": {"phase": phase},
    }


def by_labels(**labels: str) -> dict[str, Any]:
    return {"selector": {"matchLabels": labels}}


def names(pods: list[Any]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


NAMESPACES = {"a": {"team": "a"}, "b": {"team": "b"}, "default": {}}


# --- the rule a pod gets ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidate", "rules", "expected"),
    [
        # no rule: MCM's drain, order group 0
        (pod("p"), [], r.PodRule(DrainBehavior.DRAIN)),
        # the label shortcut, whatever the rules say
        (
            pod("p", **{"mcm-tasks.io/drain": "skip"}),
            [rule("x", order=5)],
            r.PodRule(DrainBehavior.SKIP, source="label"),
        ),
        (
            pod("p", **{"mcm-tasks.io/drain": "wait-completed"}),
            [],
            r.PodRule(DrainBehavior.WAIT_COMPLETED, source="label"),
        ),
        # an unknown label value is no shortcut
        (pod("p", **{"mcm-tasks.io/drain": "later"}), [], r.PodRule(DrainBehavior.DRAIN)),
        # a rule selecting the pod by its labels
        (
            pod("p", app="db"),
            [rule("db", order=-5, pods=[by_labels(app="db")])],
            r.PodRule(DrainBehavior.DRAIN, -5, "db"),
        ),
        (
            pod("p", app="web"),
            [rule("db", order=-5, pods=[by_labels(app="db")])],
            r.PodRule(DrainBehavior.DRAIN),
        ),
        # by its namespace's labels
        (
            pod("p", "a"),
            [rule("ns", "Skip", pods=[{"namespaceSelector": {"matchLabels": {"team": "a"}}}])],
            r.PodRule(DrainBehavior.SKIP, 0, "ns"),
        ),
        (
            pod("p", "b"),
            [rule("ns", "Skip", pods=[{"namespaceSelector": {"matchLabels": {"team": "a"}}}])],
            r.PodRule(DrainBehavior.DRAIN),
        ),
        # selector AND namespaceSelector within one entry; entries OR'ed
        (
            pod("p", "a", app="web"),
            [
                rule(
                    "both",
                    "Skip",
                    pods=[
                        {
                            "selector": {"matchLabels": {"app": "db"}},
                            "namespaceSelector": {"matchLabels": {"team": "a"}},
                        }
                    ],
                )
            ],
            r.PodRule(DrainBehavior.DRAIN),
        ),
        (
            pod("p", "b", app="web"),
            [rule("or", "Skip", pods=[by_labels(app="db"), by_labels(app="web")])],
            r.PodRule(DrainBehavior.SKIP, 0, "or"),
        ),
        # the first rule by name wins
        (
            pod("p"),
            [rule("a-first", order=1), rule("b-second", order=-1)],
            r.PodRule(DrainBehavior.DRAIN, 1, "a-first"),
        ),
    ],
)
def test_the_rule_a_pod_gets(
    candidate: dict[str, Any], rules: list[MachineDrainRule], expected: r.PodRule
) -> None:
    usable = r.rules_for_machine(rules, {})
    assert r.rule_for_pod(candidate, usable, NAMESPACES) == expected


@pytest.mark.parametrize(
    ("machines", "labels", "applies"),
    [
        ([], {}, True),  # empty: every machine
        ([by_labels(pool="gpu")], {"pool": "gpu"}, True),
        ([by_labels(pool="gpu")], {"pool": "cpu"}, False),
        ([by_labels(pool="gpu"), by_labels(zone="z1")], {"zone": "z1"}, True),
        (
            [{"selector": {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["gpu"]}]}}],
            {"pool": "cpu"},
            True,
        ),
        ([{}], {"anything": "x"}, True),  # an entry without a selector selects all
    ],
)
def test_a_rule_applies_to_the_machines_it_selects(
    machines: list[dict[str, Any]], labels: dict[str, str], applies: bool
) -> None:
    found = r.rules_for_machine([rule("x", machines=machines)], labels)
    assert bool(found) is applies


def test_invalid_rules_are_left_out() -> None:
    good, bad = rule("good", order=3), rule("bad", "Evict")
    assert [x.metadata.name for x in r.rules_for_machine([bad, good], {})] == ["good"]


# --- the plan --------------------------------------------------------------------------------------

#: namespace a drains before b (order -100), batch jobs must complete, a cache pod stays
RULES = [
    rule("a-first", order=-100, pods=[{"namespaceSelector": {"matchLabels": {"team": "a"}}}]),
    rule("batch", "WaitCompleted", pods=[by_labels(kind="job")]),
    rule("cache", "Skip", pods=[by_labels(app="cache")]),
    rule("last", order=10, pods=[by_labels(app="logs")]),
]


@pytest.mark.parametrize(
    ("pods", "forced", "now", "later", "waiting", "left", "group"),
    [
        # no pods in play
        ([], False, [], [], [], [], None),
        # namespace a first, the rest (order 0 and 10) later; the job waits; the cache stays
        (
            [
                pod("a1", "a"),
                pod("a2", "a"),
                pod("b1", "b"),
                pod("logs", "b", app="logs"),
                pod("job", "b", kind="job"),
                pod("cache", "b", app="cache"),
            ],
            False,
            ["a1", "a2"],
            ["b1", "logs"],
            ["job"],
            ["cache"],
            -100,
        ),
        # once namespace a is gone: group 0, then 10
        ([pod("b1", "b"), pod("logs", "b", app="logs")], False, ["b1"], ["logs"], [], [], 0),
        ([pod("logs", "b", app="logs")], False, ["logs"], [], [], [], 10),
        # a completed WaitCompleted pod holds nothing (and is not evicted)
        (
            [pod("job", "b", "Succeeded", kind="job"), pod("job2", "b", "Failed", kind="job")],
            False,
            [],
            [],
            [],
            ["job", "job2"],
            None,
        ),
        # only a running job left: nothing to remove, the drain waits for it
        ([pod("job", "b", kind="job")], False, [], [], ["job"], [], None),
        # forced: the groups stay, nothing is waited for
        (
            [pod("a1", "a"), pod("b1", "b"), pod("job", "b", kind="job")],
            True,
            ["a1"],
            ["b1"],
            [],
            ["job"],
            -100,
        ),
        # the label shortcut beats the rules
        (
            [pod("a1", "a", **{"mcm-tasks.io/drain": "skip"}), pod("b1", "b")],
            False,
            ["b1"],
            [],
            [],
            ["a1"],
            0,
        ),
    ],
)
def test_the_drain_plan_with_rules(
    pods: list[dict[str, Any]],
    forced: bool,
    now: list[str],
    later: list[str],
    waiting: list[str],
    left: list[str],
    group: int | None,
) -> None:
    plan = r.plan(pods, r.rules_for_machine(RULES, {}), NAMESPACES, forced=forced)
    assert (names(plan.now), names(plan.later), names(plan.waiting), names(plan.left)) == (
        now,
        later,
        waiting,
        left,
    )
    assert plan.group == group
    assert plan.holds_the_drain is bool(later or waiting)
    assert names(plan.held) == sorted(later + waiting + left)


def test_without_rules_the_plan_is_mcms_drain() -> None:
    pods = [pod("x"), pod("y", "a"), pod("z", "b", "Succeeded")]
    plan = r.plan(pods, [], {})
    assert names(plan.now) == ["x", "y", "z"] and not plan.held and plan.group == 0


def test_namespaces_are_read_only_for_rules_that_select_by_them() -> None:
    assert r.needs_namespaces(RULES)
    assert not r.needs_namespaces(
        [rule("x", pods=[by_labels(app="a")]), rule("y", pods=[{"namespaceSelector": {}}])]
    )


# --- hostile rules -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (rule("x", "Evict"), "spec.drain.behavior: 'Evict' is not one of Drain, Skip, WaitCompleted"),
        (rule("x", ""), "spec.drain.behavior: '' is not one of"),
        (rule("x", "Drain" * 1000), "is not one of"),
        (rule("x", order=2**31), "spec.drain.order: 2147483648 is outside the int32 range"),
        (rule("x", order=-(2**31) - 1), "outside the int32 range"),
        (rule("x", order=10**400), "outside the int32 range"),
        (rule("x", "Skip", order=3), "spec.drain.order: may only be set when the behavior is Drain"),
        (
            rule("x", pods=[{"selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]),
            "spec.pods[0].selector",
        ),
        (
            rule("x", pods=[{"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]),
            "spec.pods[0].namespaceSelector",
        ),
        (
            rule("x", machines=[{"selector": {"matchExpressions": [{"key": "pool", "operator": "exists"}]}}]),
            "spec.machines[0].selector",
        ),
    ],
)
def test_hostile_rules_have_problems_in_short_words(bad: MachineDrainRule, says: str) -> None:
    found = problems(bad)
    assert found and says in summary(found)
    assert len(summary(found)) < 1200


@pytest.mark.parametrize(
    "good", [rule("x"), rule("x", order=-(2**31)), rule("x", "WaitCompleted"), rule("x", "Skip", order=0)]
)
def test_valid_rules_have_none(good: MachineDrainRule) -> None:
    assert problems(good) == []


def test_many_problems_are_summed_up() -> None:
    bad = rule(
        "x",
        "Evict",
        pods=[{"selector": {"matchExpressions": [{"key": "k", "operator": f"Op{i}"}]}} for i in range(9)],
    )
    assert summary(problems(bad)).endswith("and 5 more")
