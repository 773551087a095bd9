"""The InPlaceUpdate strategy end to end in the sandbox, with real workers and the kubelet
simulator playing the node agent: a MachineDeployment rolls in place with Auto orchestration
(machines keep their VMs and move to the new MachineSet, never more than maxUnavailable at once),
also with a node agent that writes only the ``update-result`` label (MCM writes the Node condition
from it, as upstream's ``updateNodeConditionBasedOnLabel``), with Manual orchestration (the new set
is created empty, nothing moves until an operator selects a node), with a failed update (the
machine is replaced) and with an update that never finishes (the in-place timeout)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcm_sandbox.kubelet.inplace import AGENT_ANNOTATION, INPLACE_ANNOTATION, LABELS_ONLY
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api.constants import (
    CANDIDATE_FOR_UPDATE_LABEL_KEY,
    PREFER_NO_SCHEDULE_KEY,
    SCALE_UP_DISABLED_LABEL_KEY,
    SELECTED_FOR_UPDATE_LABEL_KEY,
    UPDATE_RESULT_LABEL_KEY,
)
from mcm_tasks.kube import ops
from tests.e2e.inplace_support import NS, WAIT, Pool, pool_in
from tests.e2e.support import running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

ENV = {
    "MCM_LONG_RETRY": "10s",
    "MCM_MACHINE_HEALTH_TIMEOUT": "3s",
    "MCM_MACHINE_DRAIN_TIMEOUT": "10s",
    # long enough that a slow CI host never times out an update that succeeds; the hanging update's
    # deployment sets its machines' own inPlaceUpdateTimeout (HANG_TIMEOUT)
    "MCM_MACHINE_INPLACE_UPDATE_TIMEOUT": "60s",
}
HANG_TIMEOUT = "6s"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(Path(tmp_path_factory.mktemp("inplace-e2e")), ENV, with_beat=False) as started:
        yield started


@pytest.fixture(scope="module")
def pool(sandbox: Sandbox) -> Iterator[Pool]:
    with pool_in(sandbox) as made:
        yield made


def test_auto_rolls_in_place_within_max_unavailable(pool: Pool) -> None:
    pool.deployment("auto", 3, "Auto", max_unavailable=1)
    before = pool.running("auto")
    worst: list[int] = [0]
    stop = threading.Event()

    def observe() -> None:  # never more than maxUnavailable machines out of Running at once
        while not stop.is_set():
            worst[0] = max(worst[0], 3 - len(pool.running("auto")))
            stop.wait(0.1)

    watcher = threading.Thread(target=observe, daemon=True)
    watcher.start()
    pool.update("auto")
    pool.wait(
        lambda: SCALE_UP_DISABLED_LABEL_KEY in pool.sets("auto")[0]["metadata"].get("labels", {}),
        "old set scale-up disabled",
    )
    try:
        pool.wait(lambda: pool.rolled("auto", 3), "every machine updated in place and moved to the new set")
    finally:
        stop.set()
        watcher.join(5)
    lost = sorted(set(before) - set(pool.running("auto")))
    assert not lost, f"the same machines (and VMs), updated, not replaced; lost {lost}: {pool.story(lost)}"
    assert worst[0] <= 1, f"{worst[0]} machines out of Running at once, maxUnavailable is 1"
    for name in before:
        pool.wait(lambda name=name: pool.node_labels(name).get("os-version") == "2", "the new node template")
        labels = pool.node_labels(name)
        assert not {CANDIDATE_FOR_UPDATE_LABEL_KEY, SELECTED_FOR_UPDATE_LABEL_KEY} & set(labels)
        assert not pool.node(name).get("spec", {}).get("unschedulable")
        pool.wait(
            lambda name=name: PREFER_NO_SCHEDULE_KEY not in pool.taint_keys(name),
            "the old set's PreferNoSchedule taint off a moved machine's Node",
        )
    status = (ops.get(pool.control, kinds.MACHINE_DEPLOYMENT.resource, "auto", NS) or {}).get("status") or {}
    pool.wait(
        lambda: (
            (
                (ops.get(pool.control, kinds.MACHINE_DEPLOYMENT.resource, "auto", NS) or {}).get("status")
                or {}
            ).get("updatedReplicas")
            == 3
        ),
        f"deployment status updated ({status})",
    )


def test_auto_completes_with_a_labels_only_node_agent(pool: Pool) -> None:
    """Upstream's node agent writes the ``update-result`` label and no condition: MCM turns it into
    the Node's ``InPlaceUpdate`` condition and moves the machine from there."""
    pool.deployment("agent", 2, "Auto", max_unavailable=1)
    before = pool.running("agent")
    for name in before:
        annotations = {"metadata": {"annotations": {AGENT_ANNOTATION: LABELS_ONLY}}}
        ops.patch(pool.target, kinds.NODE.resource, name, annotations)
    pool.update("agent")
    pool.wait(lambda: pool.rolled("agent", 2), "labels-only agent: every machine updated in place and moved")
    lost = sorted(set(before) - set(pool.running("agent")))
    assert not lost, f"the same machines, updated in place; lost {lost}: {pool.story(lost)}"
    for name in before:
        condition = next(
            c for c in pool.node(name)["status"]["conditions"] if c.get("type") == "InPlaceUpdate"
        )
        assert (condition["reason"], condition["message"]) == (
            "UpdateSuccessful",
            "Node in-place update successful",
        ), "written by MCM from the agent's label"
        labels = pool.node_labels(name)
        assert not {CANDIDATE_FOR_UPDATE_LABEL_KEY, SELECTED_FOR_UPDATE_LABEL_KEY} & set(labels)

    # a Node of the new set left with its update labels and cordoned (a move whose Node write was
    # lost): the deployment clears them and uncordons it, as upstream's syncMachineSets
    stuck = before[0]
    left_behind = {
        CANDIDATE_FOR_UPDATE_LABEL_KEY: "true",
        SELECTED_FOR_UPDATE_LABEL_KEY: "true",
        UPDATE_RESULT_LABEL_KEY: "successful",
    }
    body = {"metadata": {"labels": left_behind}, "spec": {"unschedulable": True}}
    ops.patch(pool.target, kinds.NODE.resource, stuck, body)
    wake = {"metadata": {"annotations": {"e2e.mcm-tasks.io/nudge": "1"}}}
    ops.patch(pool.control, kinds.MACHINE_DEPLOYMENT.resource, "agent", wake, NS)
    pool.wait(
        lambda: (
            not set(left_behind) & set(pool.node_labels(stuck))
            and not pool.node(stuck).get("spec", {}).get("unschedulable")
        ),
        "the update labels left on a new set's Node cleared, the Node uncordoned",
    )


def test_manual_creates_the_new_set_empty_and_waits_for_an_operator(pool: Pool) -> None:
    pool.deployment("manual", 2, "Manual", max_surge=1)
    first, second = pool.running("manual")
    pool.update("manual")
    pool.wait(lambda: len(pool.sets("manual")) == 2, "the new set created")
    pool.wait(lambda: CANDIDATE_FOR_UPDATE_LABEL_KEY in pool.node_labels(first), "nodes are candidates")
    assert pool.sets("manual")[-1]["spec"]["replicas"] == 0, "Manual: the new set is created empty"
    assert len(pool.machines("manual")) == 2, "Manual: no machine of the new template, whatever maxSurge"
    assert SELECTED_FOR_UPDATE_LABEL_KEY not in pool.node_labels(first), "Manual: MCM selects nothing"
    ops.patch(
        pool.target,
        kinds.NODE.resource,
        first,
        {"metadata": {"labels": {SELECTED_FOR_UPDATE_LABEL_KEY: "true"}}},
    )
    new_set = lambda: pool.sets("manual")[-1]["metadata"]["name"]  # noqa: E731
    pool.wait(
        lambda: (
            any(
                m["metadata"]["name"] == first and pool.owner(m) == new_set() for m in pool.machines("manual")
            )
            and pool.phase(first) == "Running"
        ),
        "the selected machine updated and moved",
    )
    assert all(pool.owner(m) != new_set() for m in pool.machines("manual") if m["metadata"]["name"] == second)
    ops.patch(
        pool.target,
        kinds.NODE.resource,
        second,
        {"metadata": {"labels": {SELECTED_FOR_UPDATE_LABEL_KEY: "true"}}},
    )
    pool.wait(lambda: pool.rolled("manual", 2), "the second one too: rollout complete")
    assert pool.running("manual") == sorted([first, second])


@pytest.mark.parametrize(("order", "name"), [("fail", "failing"), ("hang", "hanging")])
def test_failed_or_timed_out_update_replaces_the_machine(pool: Pool, order: str, name: str) -> None:
    pool.deployment(name, 2, "Auto", update_timeout=HANG_TIMEOUT)
    bad, good = pool.running(name)
    ops.patch(
        pool.target, kinds.NODE.resource, bad, {"metadata": {"annotations": {INPLACE_ANNOTATION: order}}}
    )
    ops.patch(
        pool.target, kinds.NODE.resource, good, {"metadata": {"annotations": {INPLACE_ANNOTATION: "hang"}}}
    )  # one at a time
    pool.update(name)
    # whichever is selected first: the one ordered to fail (or hang) must end InPlaceUpdateFailed
    seen: set[str] = set()

    def failed() -> bool:
        phase = pool.phase(bad)
        seen.add(phase)
        return phase == "InPlaceUpdateFailed" or "InPlaceUpdateFailed" in seen

    ops.patch(
        pool.target, kinds.NODE.resource, good, {"metadata": {"annotations": {INPLACE_ANNOTATION: None}}}
    )
    pool.wait(failed, f"the {order} update ends InPlaceUpdateFailed", timeout=WAIT)
    # then Failed after the health timeout, replaced by a machine of the new template
    pool.wait(lambda: pool.rolled(name, 2) and bad not in pool.running(name), "replaced; rollout complete")
    assert good in pool.running(name)
