"""Pod selection and ordering of the drain (drain_select), as tables."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_tasks.controllers.machine.drain import select as ds

NODE = "node-a"


def pod(
    name: str,
    *,
    node: str = NODE,
    owner: str | None = "ReplicaSet",
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    volumes: list[dict[str, Any]] | None = None,
    priority: Any = None,
    grace: Any = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o", "uid": "u", "controller": True}]
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {"nodeName": node, "volumes": volumes or []}
    if priority is not None:
        spec["priority"] = priority
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


PVC = {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}}
EMPTY_DIR = {"name": "scratch", "emptyDir": {}}


@pytest.mark.parametrize(
    ("candidate", "selected"),
    [
        (pod("plain"), True),
        (pod("elsewhere", node="node-b"), False),
        (pod("unscheduled", node=""), False),
        (pod("mirror", annotations={ds.MIRROR_POD_ANNOTATION: "abc"}), False),
        (pod("daemon", owner="DaemonSet"), False),
        (pod("scratch", volumes=[EMPTY_DIR]), True),
        (pod("unmanaged", owner=None), True),
        (pod("done", phase="Succeeded"), True),
        (pod("crashed", phase="Failed", owner=None), True),
        (pod("with-claim", volumes=[PVC]), True),
    ],
    ids=lambda v: v["metadata"]["name"] if isinstance(v, dict) else str(v),
)
def test_selection_rules(candidate: dict[str, Any], selected: bool) -> None:
    assert (candidate in ds.pods_for_deletion([candidate], NODE)) is selected


def test_selection_without_node_name_selects_nothing() -> None:
    assert ds.pods_for_deletion([pod("a", node="")], "") == []


def test_selection_is_sorted_by_key() -> None:
    names = [ds.pod_key(p) for p in ds.pods_for_deletion([pod("b"), pod("a"), pod("c")], NODE)]
    assert names == ["ns/a", "ns/b", "ns/c"]


@pytest.mark.parametrize(
    ("candidate", "reason"),
    [
        (pod("m", annotations={ds.MIRROR_POD_ANNOTATION: ""}), "mirror pod"),
        (pod("d", owner="DaemonSet"), "DaemonSet pod"),
        (pod("p"), ""),
    ],
)
def test_skip_reason(candidate: dict[str, Any], reason: str) -> None:
    assert ds.skip_reason(candidate) == reason


def test_split_by_volumes_keeps_order() -> None:
    a, b, c = pod("a", volumes=[PVC]), pod("b"), pod("c", volumes=[EMPTY_DIR, PVC])
    with_pv, without = ds.split_by_volumes([a, b, c])
    assert with_pv == [a, c]
    assert without == [b]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, 0), (100, 100), (-5, -5), ("7", 7), ("x", 0), (True, 0), (2000000000, 2000000000), ([], 0)],
)
def test_priority_of_tolerates_missing_and_malformed(raw: Any, expected: int) -> None:
    assert ds.priority_of(pod("p", priority=raw)) == expected


def test_by_priority_highest_first_missing_counts_as_zero_ties_by_key() -> None:
    pods = [
        pod("z-none"),
        pod("low", priority=-1),
        pod("high", priority=1000),
        pod("a-none"),
        pod("mid", priority=10),
    ]
    assert [p["metadata"]["name"] for p in ds.by_priority(pods)] == ["high", "mid", "a-none", "z-none", "low"]


@pytest.mark.parametrize(("raw", "expected"), [(None, 0.0), (30, 30.0), (0, 0.0), ("30", 0.0), (True, 0.0)])
def test_grace_period_of(raw: Any, expected: float) -> None:
    assert ds.grace_period_of(pod("p", grace=raw)) == expected


def test_claim_names_deduplicated_in_order() -> None:
    vols = [
        {"name": "a", "persistentVolumeClaim": {"claimName": "c1"}},
        EMPTY_DIR,
        {"name": "b", "persistentVolumeClaim": {"claimName": "c2"}},
        {"name": "c", "persistentVolumeClaim": {"claimName": "c1"}},
    ]
    assert ds.claim_names(pod("p", volumes=vols)) == ["c1", "c2"]
    assert ds.has_volumes(pod("p", volumes=vols))
    assert not ds.has_volumes(pod("p", volumes=[EMPTY_DIR]))


def test_predicates_on_sparse_pods() -> None:
    bare: dict[str, Any] = {}
    assert ds.pod_key(bare) == "/"
    assert not ds.is_terminating(bare)
    assert not ds.is_finished(bare)
    assert not ds.has_local_storage(bare)
    assert ds.controller_of(bare) is None
    assert ds.is_terminating({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}})
