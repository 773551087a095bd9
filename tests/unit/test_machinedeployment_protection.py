"""The cluster-autoscaler's scale-down protection of a rollout against the machine controller, on the
recording fake (tests/kube_fake.py) and a real Redis: machine passes during a rollout must leave the
protection the deployment put on its nodes (the preservation step shares the ``…-by-mcm`` marker
and once took it for a leftover of its own), so each node is annotated once and cleared once, and
no node keeps it after the rollout (issue 19: 2–3× the node annotation writes, protection flapping).
A live pass reading the nodes from a real informer's mirror needs the sandbox API server:
tests/integration/test_machinedeployment_api_server.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcm_sandbox.procs import wait_until
from mcm_tasks import kinds
from mcm_tasks.api.constants import (
    CA_SCALE_DOWN_DISABLED_ANNOTATION,
    CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION,
    PREFER_NO_SCHEDULE_KEY,
    PRESERVE_ANNOTATION,
)
from mcm_tasks.controllers.machine.reconcile import reconcile_machine
from mcm_tasks.controllers.machinedeployment import taints_io
from mcm_tasks.kube import ops
from tests.machinedeployment_support import (
    World,
    _annotations,
    _joined,
    _local_class,
    _mcm_protected,
    _node_names,
    deployment_body,
    template,
)


class Flips:
    """Each node's protection as last seen, and how often it changed (seen between passes)."""

    def __init__(self) -> None:
        self.last: dict[str, bool] = {}
        self.changes: dict[str, int] = {}

    def look(self, world: World) -> None:
        for machine in world.machines():
            name = machine["metadata"]["name"]
            node = world.node(name)
            if node is None:
                continue
            now = _mcm_protected(node)
            if self.last.get(name, False) != now:
                self.changes[name] = self.changes.get(name, 0) + 1
            self.last[name] = now


def _machine_passes(world: World, joined: set[str]) -> None:
    """The machine controller's pass over every machine with a node (joined first: past creation,
    Ready, so the pass runs the health check, the node sync and the preservation step)."""
    for machine in world.machines():
        name = machine["metadata"]["name"]
        if machine["metadata"].get("deletionTimestamp"):
            # the termination flow is not under test here: let the machine and its node go
            ops.patch(
                world.api, kinds.MACHINE.resource, name, {"metadata": {"finalizers": None}}, world.namespace
            )
            ops.delete(world.api, kinds.NODE.resource, name, missing_ok=True)
            continue
        if world.node(name) is None:
            continue
        if name not in joined:
            _joined(world, name)
            joined.add(name)
        reconcile_machine(f"{world.namespace}/{name}")


def test_machine_passes_leave_a_rollouts_scale_down_protection_alone(world: World) -> None:
    world.reconfigure(autoscaler_scaledown_annotation_during_rollout=True)
    _local_class(world, "class-v1")
    _local_class(world, "class-v2")
    world.create(deployment_body("pool", 4, surge=1, unavailable=0))
    world.settle()
    joined: set[str] = set()
    _machine_passes(world, joined)
    # a Running machine asked to be preserved only when it fails: not preserved, nothing to stop
    when_failed = sorted(joined)[0]
    ops.patch(
        world.api,
        kinds.MACHINE.resource,
        when_failed,
        {"metadata": {"annotations": {PRESERVE_ANNOTATION: "when-failed"}}},
        world.namespace,
    )

    world.patch({"spec": {"template": template("class-v2")}})
    flips = Flips()

    def rolled_out() -> bool:
        flips.look(world)
        protected = {name for name, on in flips.last.items() if on}
        _machine_passes(world, joined)
        flips.look(world)
        # the machine passes took no protection the deployment put on (the rollout still runs)
        for name in protected:
            node = world.node(name)
            assert node is None or _mcm_protected(node), (name, _annotations(node))
        return world.complete()

    world.settle(until=rolled_out)
    world.reconcile()  # the pass that sees the rollout complete ends the protection
    _machine_passes(world, joined)
    flips.look(world)

    assert when_failed in flips.changes
    # protected once and, for the nodes that outlive the rollout, cleared once: never flapping
    assert flips.changes and all(n <= 2 for n in flips.changes.values()), flips.changes
    for machine in world.machines():
        notes = _annotations(world.node(machine["metadata"]["name"]))
        assert CA_SCALE_DOWN_DISABLED_ANNOTATION not in notes, (machine["metadata"]["name"], notes)


def test_a_protection_taken_off_by_hand_comes_back_within_short_retry(world: World) -> None:
    """Deliberate difference: a process re-reads a node it found protected during the rollout only
    once ShortRetry has passed (``machinedeployment.seen``), not on every pass as upstream: a pass
    reads the nodes that joined since, not every node of the deployment."""
    world.reconfigure(autoscaler_scaledown_annotation_during_rollout=True, short_retry=1.0)
    world.create(deployment_body("pool", 3, surge=1, unavailable=0))
    world.settle()
    (v1,) = world.sets()
    world.patch({"spec": {"template": template("class-v2")}})
    world.reconcile()  # the rollout starts: the old set's nodes are protected
    node = _node_names(world, v1)[0]
    assert _mcm_protected(world.node(node))
    unprotect = {CA_SCALE_DOWN_DISABLED_ANNOTATION: None, CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION: None}
    ops.patch(world.api, kinds.NODE.resource, node, {"metadata": {"annotations": unprotect}})

    world.reconcile()
    assert not _mcm_protected(world.node(node))  # found protected less than ShortRetry ago: not read

    def protected_again() -> bool:
        world.reconcile()
        return _mcm_protected(world.node(node))

    wait_until(protected_again, 10.0, interval=0.2, what="the protection back")


def test_an_old_node_is_tainted_and_protected_in_one_write(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.reconfigure(autoscaler_scaledown_annotation_during_rollout=True)
    world.create(deployment_body("pool", 3, surge=1, unavailable=0))
    world.settle()
    (v1,) = world.sets()
    names = _node_names(world, v1)
    written: list[str] = []
    real_patch = taints_io.ops.patch

    def patch(api: Any, resource: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if resource == kinds.NODE.resource:
            written.append(name)
        return real_patch(api, resource, name, *args, **kwargs)

    monkeypatch.setattr(taints_io.ops, "patch", patch)
    world.patch({"spec": {"template": template("class-v2")}})
    world.reconcile()  # the rollout's first pass

    assert sorted(written) == sorted(names)
    for name in names:
        node = world.node(name)
        assert _mcm_protected(node) and PREFER_NO_SCHEDULE_KEY in str(node["spec"].get("taints")), node
