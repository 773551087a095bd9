"""What holds a set or deployment up, in words (``controllers/common/holdup.py``), and ``admin why``'s
pure report (``admin/why.py`` ``explain``)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_tasks.admin.keys import KeyState, NotFound
from mcm_tasks.admin.why import QueueFacts, Target, explain, parse_target
from mcm_tasks.api import Machine
from mcm_tasks.controllers.common.holdup import (
    Wait,
    holding,
    holding_waits,
    holdup_message,
    machine_wait,
    waits_message,
)
from mcm_tasks.queue.state import Failing

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def machine(name: str, phase: str = "", provider_id: str = "", age: float = 40, deleting: bool = False,
            description: str = "") -> Machine:  # fmt: skip
    created = (NOW - timedelta(seconds=age)).isoformat().replace("+00:00", "Z")
    meta: dict[str, Any] = {"name": name, "namespace": "default", "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = created
    return Machine.model_validate({
        "metadata": meta, "spec": {"providerID": provider_id},
        "status": {"currentStatus": {"phase": phase}, "lastOperation": {"description": description}},
    })  # fmt: skip


@pytest.mark.parametrize(
    ("m", "words"),
    [
        (machine("a"), "creating VM"),
        (machine("a", "Pending", provider_id="local:///a"), "waiting for Node"),
        (machine("a", "Failed"), "failed, to be replaced"),
        (machine("a", "CrashLoopBackOff"), "creation failing, retried until the creation timeout"),
        (machine("a", "Running", deleting=True, description="Drain the node"), "deleting: Drain the node"),
    ],
)
def test_what_a_machine_waits_for(m: Machine, words: str) -> None:
    found = machine_wait(m, NOW)
    assert found is not None and found.waits_for == words


def test_a_running_machine_holds_nothing_up() -> None:
    assert machine_wait(machine("a", "Running"), NOW) is None


def test_the_message_names_machines_by_phase_longest_first() -> None:
    waits = holding([machine("md-abc-y", provider_id="p", age=3), machine("md-abc-x", age=40),
                     machine("ok", "Running")], NOW)  # fmt: skip
    assert (
        holdup_message(waits)
        == "2 machines Pending: md-abc-x (creating VM, 40 s), md-abc-y (waiting for Node, 3 s)"
    )


def test_the_message_counts_what_it_does_not_name() -> None:
    waits = holding([machine(f"m{i}", age=10 + i) for i in range(4)], NOW)
    assert (
        holdup_message(waits, limit=2)
        == "4 machines Pending: m3 (creating VM, 13 s), m2 (creating VM, 12 s), 2 more"
    )


def test_the_set_conditions_message_is_the_sorted_one_to_the_letter() -> None:
    """``waits_message`` (a set's scaling conditions, every pass) names the machines the full sort
    would, ties, starts in the future, no start, limits 0 and over the count included."""
    rnd = random.Random(33)
    offsets = (-0.5, -1, -3, -59, -60, -61, -119, -200, -7300, 0, 5)
    for _ in range(2000):
        waits = [
            Wait(f"m{rnd.randint(0, 6)}", rnd.choice(("Pending", "Available", "Failed")), "x",
                 None if rnd.random() < 0.1 else NOW + timedelta(seconds=rnd.choice(offsets)), "")
            for _ in range(rnd.randint(0, 25))
        ]  # fmt: skip
        limit, coarse = rnd.randint(0, 8), rnd.random() < 0.5
        expected = holdup_message(holding_waits(waits, NOW), limit, coarse=coarse)
        assert waits_message(waits, NOW, limit, coarse=coarse) == expected


def test_targets_parse_and_refuse() -> None:
    assert parse_target("machine/ns/m") == Target(kind="machine", namespace="ns", name="m")
    assert parse_target("node/n1").key == "n1"
    assert parse_target("machineset/ns/s").key == "ns/s"
    for bad in ("pod/ns/p", "machine", "machine//"):
        with pytest.raises(NotFound):
            parse_target(bad)


def test_explain_puts_the_failure_the_expectations_and_the_freeze_first() -> None:
    failing = Failing(kind="machineset", key="ns/s", error="ApiException", message="500", count=3, since=1.0,
                      time=2.0, retry_at=5.0)  # fmt: skip
    key = KeyState(
        kind="machineset",
        key="ns/s",
        state="failing",
        summary=[],
        in_mirror=True,
        waiting=False,
        delayed_until=None,
        running=None,
        running_on=None,
        failing=failing,
        history=[],
    )
    obj = {"metadata": {"name": "s", "labels": {"freeze": "True"}}, "spec": {"replicas": 2},
           "status": {"conditions": [{"type": "Frozen", "status": "True"}]}}  # fmt: skip
    found = explain(Target(kind="machineset", namespace="ns", name="s"), obj, [key],
                    QueueFacts(expectations=(2, 0, 30.0)), [], [], now=10.0)  # fmt: skip
    assert found.frozen and found.waits[0].startswith("frozen")
    assert "failing on queue machineset 3 times" in found.waits[1]
    assert found.waits[2].startswith("waiting for expectations: 2 creations")
    settled = explain(Target(kind="machineset", namespace="ns", name="s"), {"metadata": {}}, [], QueueFacts(),
                      [], [], now=10.0)  # fmt: skip
    assert settled.waits == ["nothing: idle and settled"]
