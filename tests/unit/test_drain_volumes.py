"""Volume decisions of the drain (drain_volumes): detach, reattach, shared PVs, the detach barrier."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_tasks.controllers.machine.drain import volumes as dv

NODE = "node-a"


def node(*attached: str) -> dict[str, Any]:
    return {"metadata": {"name": NODE}, "status": {"volumesAttached": [{"name": n} for n in attached]}}


def va(name: str, pv: str, on: str = NODE, attached: bool = True, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": on, "source": {"persistentVolumeName": pv}},
        "status": {"attached": attached},
    }


@pytest.mark.parametrize(
    ("ids", "n", "state"),
    [
        (["vol-1"], node("kubernetes.io/csi/local.csi.mcm-tasks.io^vol-1"), dv.Detach.ATTACHED),
        (["vol-1"], node("kubernetes.io/csi/local.csi.mcm-tasks.io^vol-2"), dv.Detach.DETACHED),
        (["vol-1", "vol-2"], node("x^vol-2"), dv.Detach.ATTACHED),
        (["vol-1"], node(), dv.Detach.DETACHED),
        (["vol-1"], {"metadata": {"name": NODE}}, dv.Detach.DETACHED),
        ([], node("x^vol-1"), dv.Detach.DETACHED),  # nothing tracked (another driver's volume)
        ([""], node("x^vol-1"), dv.Detach.DETACHED),
        (["vol-1"], None, dv.Detach.NODE_GONE),
    ],
)
def test_detach_state(ids: list[str], n: dict[str, Any] | None, state: dv.Detach) -> None:
    assert dv.detach_state(ids, n) is state


@pytest.mark.parametrize(
    ("pvs", "vas", "done"),
    [
        (["pv-1"], [va("a", "pv-1", on="node-b")], True),
        (["pv-1"], [va("a", "pv-1", on="node-b", attached=False)], False),
        (["pv-1"], [va("a", "pv-1", on=NODE)], False),  # still (or again) here
        (["pv-1", "pv-2"], [va("a", "pv-1", on="node-b")], False),
        (["pv-1", "pv-2"], [va("a", "pv-1", on="node-b"), va("b", "pv-2", on="node-c")], True),
        ([], [], True),
    ],
)
def test_reattached(pvs: list[str], vas: list[dict[str, Any]], done: bool) -> None:
    assert dv.reattached(pvs, vas, NODE) is done


def test_shared_pv_names() -> None:
    shared = dv.shared_pv_names({"a": ["pv-1", "pv-2"], "b": ["pv-2", "pv-3"], "c": ["pv-4", "pv-4"]})
    assert shared == {"pv-2"}


@pytest.mark.parametrize(
    ("vas", "in_use", "left"),
    [
        ([], [], []),
        ([va("a", "pv-1")], [], ["a"]),
        ([va("a", "pv-1")], ["pv-1"], []),  # a DaemonSet pod that stays still mounts it
        ([va("a", "pv-1", deleting=True)], [], []),  # on its way out already
        ([va("a", "pv-1", on="node-b")], [], []),  # another node's
        ([va("b", "pv-2"), va("a", "pv-1")], [], ["a", "b"]),
    ],
)
def test_detach_barrier(vas: list[dict[str, Any]], in_use: list[str], left: list[str]) -> None:
    assert dv.detach_barrier(NODE, vas, in_use) == left


def test_deadlines() -> None:
    assert dv.detach_deadline(100.0, 30.0, 120.0) == 250.0
    assert dv.reattach_deadline(100.0, 90.0) == 190.0
