"""Claim decisions and owner-reference patches (``mcm_tasks.controllers.common.owners``)."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_tasks.api import LabelSelector, Machine, MachineSet
from mcm_tasks.controllers.common.owners import (
    ClaimAction,
    adopt_patch,
    claim_action,
    is_controlled_by,
    release_patch,
    selects,
)

OWNER_UID = "uid-ms"


def owner(deleting: bool = False) -> MachineSet:
    meta: dict[str, Any] = {"name": "ms", "namespace": "ns", "uid": OWNER_UID}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return MachineSet.model_validate({"metadata": meta})


def child(
    labels: dict[str, str] | None = None,
    controller: str | None = None,
    others: list[str] | None = None,
    deleting: bool = False,
) -> Machine:
    refs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": f"o-{uid}", "uid": uid} for uid in (others or [])
    ]
    if controller:
        refs.append(
            {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "name": "x",
             "uid": controller, "controller": True}
        )  # fmt: skip
    meta: dict[str, Any] = {
        "name": "m", "namespace": "ns", "uid": "uid-m", "resourceVersion": "7",
        "labels": labels or {}, "ownerReferences": refs,
    }  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return Machine.model_validate({"metadata": meta})


SEL = LabelSelector(match_labels={"app": "a"})
MATCH = {"app": "a", "extra": "x"}
NO_MATCH = {"app": "b"}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (SEL, MATCH, True),
        (SEL, NO_MATCH, False),
        (SEL, {}, False),
        (LabelSelector(), MATCH, False),  # empty selects nothing here
        (None, MATCH, False),
        (LabelSelector(match_expressions=[{"key": "app", "operator": "In", "values": ["a"]}]), MATCH, True),
    ],
)
def test_selects(selector: LabelSelector | None, labels: dict[str, str], expected: bool) -> None:
    assert selects(selector, labels) is expected


@pytest.mark.parametrize(
    ("name", "machine", "owner_deleting", "selector", "expected"),
    [
        ("ours and selected: keep", child(MATCH, OWNER_UID), False, SEL, ClaimAction.KEEP),
        ("ours, not selected: release", child(NO_MATCH, OWNER_UID), False, SEL, ClaimAction.RELEASE),
        (
            "ours, not selected, owner deleting: leave",
            child(NO_MATCH, OWNER_UID),
            True,
            SEL,
            ClaimAction.IGNORE,
        ),
        ("ours, owner deleting, selected: keep", child(MATCH, OWNER_UID), True, SEL, ClaimAction.KEEP),
        ("someone else's: ignore", child(MATCH, "uid-other"), False, SEL, ClaimAction.IGNORE),
        ("orphan selected: adopt", child(MATCH), False, SEL, ClaimAction.ADOPT),
        (
            "orphan with a non-controller owner: adopt",
            child(MATCH, others=["u1"]),
            False,
            SEL,
            ClaimAction.ADOPT,
        ),
        ("orphan not selected: ignore", child(NO_MATCH), False, SEL, ClaimAction.IGNORE),
        ("orphan, owner deleting: ignore", child(MATCH), True, SEL, ClaimAction.IGNORE),
        ("orphan being deleted: ignore", child(MATCH, deleting=True), False, SEL, ClaimAction.IGNORE),
        (
            "empty selector keeps what it owns",
            child(NO_MATCH, OWNER_UID),
            False,
            LabelSelector(),
            ClaimAction.KEEP,
        ),
        ("empty selector adopts nothing", child(MATCH), False, LabelSelector(), ClaimAction.IGNORE),
        ("no selector adopts nothing", child(MATCH), False, None, ClaimAction.IGNORE),
    ],
)
def test_claim_action(
    name: str, machine: Machine, owner_deleting: bool, selector: LabelSelector | None, expected: ClaimAction
) -> None:
    assert claim_action(machine.metadata, owner(owner_deleting).metadata, selector) is expected, name


def test_is_controlled_by() -> None:
    assert is_controlled_by(child(MATCH, OWNER_UID).metadata, owner().metadata)
    assert not is_controlled_by(child(MATCH, "uid-other").metadata, owner().metadata)
    assert not is_controlled_by(child(MATCH, others=[OWNER_UID]).metadata, owner().metadata)


def test_adopt_patch_keeps_other_owners_and_guards_the_write() -> None:
    patch = adopt_patch(child(MATCH, others=["u1"]), owner())
    meta = patch["metadata"]
    assert meta["resourceVersion"] == "7"
    assert meta["uid"] == "uid-m"
    assert [r["uid"] for r in meta["ownerReferences"]] == ["u1", OWNER_UID]
    ours = meta["ownerReferences"][1]
    assert ours == {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "name": "ms",
        "uid": OWNER_UID,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_release_patch_removes_only_the_owner() -> None:
    patch = release_patch(child(NO_MATCH, OWNER_UID, others=["u1"]), OWNER_UID)
    assert [r["uid"] for r in patch["metadata"]["ownerReferences"]] == ["u1"]
    assert patch["metadata"]["resourceVersion"] == "7"


def test_release_of_the_only_owner_nulls_the_list() -> None:
    patch = release_patch(child(NO_MATCH, OWNER_UID), OWNER_UID)
    assert patch["metadata"]["ownerReferences"] is None
