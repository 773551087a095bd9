"""What a kubelet tick re-decides: a Node whose resourceVersion did not change since the last tick
is not decided again (at 10 000 Nodes that was half of every tick), while one that changed is, and
the decisions stay those of ``kn.heartbeat_due``. Against a real Redis (the local cloud), no API
server: the Nodes are handed to the simulator as its watches would."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mcm_sandbox.kubelet import node as kn
from mcm_sandbox.kubelet.simulator import KubeletSimulator
from mcm_tasks.redisdb import get_redis
from providers.local import LocalCloud, LocalVM


class Watched:
    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}

    def synced(self) -> bool:
        return True

    def list(self, path: str) -> list[dict[str, Any]]:
        return list(self.nodes.values()) if path == "/api/v1/nodes" else []


def vm(i: int, now: float) -> LocalVM:
    return LocalVM(id=f"i-{i}", provider_id=f"local:///zone-a/i-{i}", machine=f"m-{i}", machine_class="ns/c",
                   zone="zone-a", region="r", instance_type="small", architecture="amd64",
                   internal_ip=f"10.0.0.{i}", created=now - 100, ready_at=now - 90,
                   registered_at=now - 80)  # fmt: skip


@pytest.fixture()
def setup(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[KubeletSimulator, Watched, list[str]]:
    now = time.time()
    cloud, watched = LocalCloud(get_redis(redis_url)), Watched()
    for i in range(3):
        v = vm(i, now)
        cloud.insert(v)
        node = kn.node_manifest(v, now)  # a fresh heartbeat: nothing due
        node["metadata"]["resourceVersion"] = "1"
        watched.nodes[v.node_name] = node
    decided: list[str] = []
    real = kn.status_changed

    def counting(node: dict[str, Any]) -> bool:
        decided.append(node["metadata"]["name"])
        return real(node)

    monkeypatch.setattr(kn, "status_changed", counting)
    return KubeletSimulator(None, cloud, heartbeat_interval=10.0, watched=watched), watched, decided  # type: ignore[arg-type]


def test_an_unchanged_node_is_not_decided_again(setup: tuple[KubeletSimulator, Watched, list[str]]) -> None:
    sim, _, decided = setup
    assert sim._node_actions(sim.snapshot()) == []
    assert sorted(decided) == ["m-0", "m-1", "m-2"]
    decided.clear()
    assert sim._node_actions(sim.snapshot()) == []
    assert decided == []


def test_a_changed_node_is_decided_again(setup: tuple[KubeletSimulator, Watched, list[str]]) -> None:
    sim, watched, decided = setup
    sim._node_actions(sim.snapshot())
    decided.clear()
    node = dict(watched.nodes["m-1"])
    node["metadata"] = {**node["metadata"], "resourceVersion": "2",
                        "annotations": {kn.CONDITION_ANNOTATION_PREFIX + "Ready": "False"}}  # fmt: skip
    watched.nodes["m-1"] = node
    actions = sim._node_actions(sim.snapshot())
    assert decided == ["m-1"]
    assert [a.what for a in actions] == ["node-status"]


def test_a_heartbeat_falls_due_without_a_change(setup: tuple[KubeletSimulator, Watched, list[str]]) -> None:
    """The memo keeps when the next heartbeat is due, not whether it was due at the last tick."""
    sim, _, decided = setup
    snap = sim.snapshot()
    assert sim._node_actions(snap) == []
    snap.now += 13.0  # past every node's period (10 s stretched by at most 24 %)
    assert [a.what for a in sim._node_actions(snap)] == ["heartbeat"] * 3
    assert sorted(decided) == ["m-0", "m-1", "m-2"]  # decided once, at the first tick
