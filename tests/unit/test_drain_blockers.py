"""What holds a drain, in words (``drain/blockers.py``): refused pods with the budget that refuses
them, pods on their way out, the rest counted."""

from __future__ import annotations

from typing import Any

from mcm_tasks.controllers.machine.drain.blockers import blockers, blockers_message
from mcm_tasks.controllers.machine.drain.state_io import DrainProgress, PodProgress


def pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels}}


def pdb(name: str, app: str, allowed: int) -> dict[str, Any]:
    selector = {"matchLabels": {"app": app}}
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed}}  # fmt: skip


def test_refused_pods_name_their_budget_and_come_first() -> None:
    progress = DrainProgress(machine_uid="u", node="n", started_at=0.0, pods={
        "ns/web-0": PodProgress(uid="1", attempts=3),
        "ns/db-0": PodProgress(uid="2", attempts=1),
        "ns/going": PodProgress(uid="3", removed_at=5.0),
        "ns/done": PodProgress(uid="4", done=True),
        "ns/fresh": PodProgress(uid="5"),
    })  # fmt: skip
    pods = {"ns/web-0": pod("web-0", {"app": "web"}), "ns/db-0": pod("db-0", {"app": "db"})}
    found = blockers(progress, pods, [pdb("web", "web", 0)])
    assert [b.pod for b in found] == ["ns/web-0", "ns/db-0", "ns/going"]
    assert blockers_message(found) == (
        "3 pods hold the drain: pod ns/web-0: eviction refused 3 times by PodDisruptionBudget ns/web "
        "(0 disruptions allowed); pod ns/db-0: eviction refused once; "
        "pod ns/going: evicted, waiting for it to terminate (and its volumes to detach)"
    )
    assert blockers_message(found, limit=1).endswith("; 2 more")
    assert blockers_message([]) == ""


def test_the_condition_form_leaves_the_refusals_out() -> None:
    """The Deleting condition's message must not change with every retry (a write each time)."""
    progress = DrainProgress(machine_uid="u", node="n", started_at=0.0,
                             pods={"ns/web-0": PodProgress(uid="1", attempts=7)})  # fmt: skip
    found = blockers(progress, {"ns/web-0": pod("web-0", {"app": "web"})}, [pdb("web", "web", 0)])
    assert blockers_message(found, counted=False) == (
        "1 pod holds the drain: pod ns/web-0: eviction refused by PodDisruptionBudget ns/web "
        "(0 disruptions allowed)"
    )


def test_the_deleting_condition_carries_what_holds_the_drain() -> None:
    from datetime import UTC, datetime

    from mcm_tasks.api import MachineStatus
    from mcm_tasks.controllers.machine import deleting

    now = datetime(2026, 11, 29, tzinfo=UTC)
    status = MachineStatus.model_validate({"lastOperation": {"description": "Initiate node drain"}})
    held = deleting.with_deleting_condition(status, now, "1 pod holds the drain: pod ns/p: eviction refused")
    (condition,) = held.conditions
    assert (condition.reason, condition.message) == (
        "DrainingNode",
        "Initiate node drain; 1 pod holds the drain: pod ns/p: eviction refused",
    )
    (plain,) = deleting.with_deleting_condition(held, now).conditions
    assert plain.message == "Initiate node drain" and plain.last_transition_time == now
