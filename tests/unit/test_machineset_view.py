"""The machines as the MachineSet's pass reads them (``set_view``): everything its decisions and its
status read, without the Node conditions the machine controller copies onto each machine, which were
most of the cost of parsing a Running machine on every pass of a thousand-machine set."""

from __future__ import annotations

from typing import Any

from mcm_sandbox.testing import fixtures as fx
from mcm_sandbox.testing.hostile import nested
from mcm_tasks.api import Machine, MachinePhase
from mcm_tasks.controllers.machineset.reconcile import set_view

READY = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}


def running(**kw: Any) -> dict[str, Any]:
    return fx.machine("m", machine_set="s", phase="Running", node="n", conditions=[READY], **kw)


def test_the_set_view_leaves_out_the_node_conditions_and_keeps_the_rest() -> None:
    raw = running(labels={"pool": "a"}, annotations={"machinepriority.machine.sapcloud.io": "1"})
    full, view = Machine.model_validate(raw), set_view(raw)
    assert full.status.conditions and not view.status.conditions
    assert view.status.current_status.phase == MachinePhase.RUNNING
    assert view.status.last_operation == full.status.last_operation
    assert view.metadata == full.metadata and view.spec == full.spec
    assert raw["status"]["conditions"] == [READY]  # the stored dict is not changed


def test_a_machine_unreadable_only_in_its_conditions_still_counts_for_its_set() -> None:
    """Its own reconcile answers it as Unreadable; its set does not replace it meanwhile."""
    raw = running()
    raw["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": nested(110)}]
    assert set_view(raw).metadata.name == "m"
