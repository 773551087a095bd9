"""The machine controller's in-place steps against the sandbox API server: the Node's update labels
become its ``InPlaceUpdate`` condition (upstream ``updateNodeConditionBasedOnLabel``), never decided
from a stale read of the Node."""

from __future__ import annotations

import pytest

from mcm_tasks import kinds
from mcm_tasks.api import now_utc
from mcm_tasks.api.constants import CANDIDATE_FOR_UPDATE_LABEL_KEY, SELECTED_FOR_UPDATE_LABEL_KEY
from mcm_tasks.controllers.common import inplace as ip
from mcm_tasks.controllers.common import nodecondition_io
from mcm_tasks.controllers.machine import inplace_io
from mcm_tasks.controllers.machine.scope import MachineScope
from mcm_tasks.kube import ops
from tests.integration.machine_support import Env, phase_is

pytestmark = pytest.mark.integration


def _reason(env: Env, name: str) -> str | None:
    return (ip.condition_of(env.node(name)) or {}).get("reason")


def test_the_condition_follows_the_labels(env: Env) -> None:
    env.start_kubelet()
    cls = env.setup_class()
    name = env.name("ip")
    env.machine(name, cls)
    machine = env.reconcile_until(name, phase_is("Running"))
    ops.patch(
        env.api, kinds.NODE.resource, name, {"metadata": {"labels": {CANDIDATE_FOR_UPDATE_LABEL_KEY: "true"}}}
    )

    node, _ = inplace_io.update_node_condition_based_on_label(
        MachineScope.begin(machine.key, machine), machine, env.node(name)
    )
    assert _reason(env, name) == "CandidateForUpdate"
    assert (ip.condition_of(env.node(name)) or {}).get("message") == "Node is a candidate for in-place update"
    assert (ip.condition_of(node) or {}).get("reason") == "CandidateForUpdate", "the pass goes on with it"

    ops.patch(
        env.api, kinds.NODE.resource, name, {"metadata": {"labels": {SELECTED_FOR_UPDATE_LABEL_KEY: "true"}}}
    )
    inplace_io.update_node_condition_based_on_label(
        MachineScope.begin(machine.key, machine), machine, env.node(name)
    )
    assert _reason(env, name) == "SelectedForUpdate"


def test_a_stale_read_of_the_node_undoes_no_later_step(env: Env) -> None:
    """Decided from a read older than the drain's ``ReadyForUpdate``, ``SelectedForUpdate`` would go
    back over it and the node agent would wait for ever: the write is a compare-and-swap, and on a
    Conflict the Node is read live and decided again (nothing to do then)."""
    env.start_kubelet()
    cls = env.setup_class()
    name = env.name("stale")
    env.machine(name, cls)
    machine = env.reconcile_until(name, phase_is("Running"))
    both = {CANDIDATE_FOR_UPDATE_LABEL_KEY: "true", SELECTED_FOR_UPDATE_LABEL_KEY: "true"}
    ops.patch(env.api, kinds.NODE.resource, name, {"metadata": {"labels": both}})
    candidate = nodecondition_io.condition(
        "InPlaceUpdate", "True", "CandidateForUpdate", "candidate", now_utc()
    )
    nodecondition_io.write(env.api, name, candidate)
    stale = env.node(name)
    ready = nodecondition_io.condition("InPlaceUpdate", "True", "ReadyForUpdate", "drained", now_utc())
    nodecondition_io.write(env.api, name, ready)  # the drain finished after the read

    node, _ = inplace_io.update_node_condition_based_on_label(
        MachineScope.begin(machine.key, machine), machine, stale
    )
    assert _reason(env, name) == "ReadyForUpdate"
    assert (ip.condition_of(node) or {}).get("reason") == "ReadyForUpdate", (
        "the pass goes on with the live Node"
    )
