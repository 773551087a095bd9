"""Creation flow decisions (pure): create-error phase and retry, stale nodes, label updates."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mcm_tasks.api import NodeAddress
from mcm_tasks.controllers.machine.create_io import (
    address_status,
    create_error_retry,
    create_failure_phase,
    is_stale_node,
    labels_patch,
)
from mcm_tasks.settings import Settings
from providers import Code
from tests.unit.machine_support import NOW, machine


@pytest.mark.parametrize(
    ("age", "spec", "phase"),
    [
        (timedelta(minutes=1), {}, "CrashLoopBackOff"),
        (timedelta(minutes=19), {}, "CrashLoopBackOff"),
        (timedelta(minutes=21), {}, "Failed"),
        (timedelta(minutes=6), {"creationTimeout": "5m"}, "Failed"),
        (timedelta(minutes=4), {"creationTimeout": "5m"}, "CrashLoopBackOff"),
    ],
)
def test_create_failure_phase(
    age: timedelta, spec: dict[str, object], phase: str, settings: Settings
) -> None:
    assert create_failure_phase(machine(age, **spec), NOW, settings) == phase


@pytest.mark.parametrize(
    ("code", "retry"),
    [
        (Code.ResourceExhausted, 600.0),
        (Code.Unknown, 5.0),
        (Code.DeadlineExceeded, 5.0),
        (Code.Aborted, 5.0),
        (Code.Unavailable, 5.0),
        (Code.Internal, 180.0),
        (Code.InvalidArgument, 180.0),
        (Code.NotFound, 180.0),
        (Code.PermissionDenied, 180.0),
    ],
)
def test_create_error_retry_by_code(code: Code, retry: float, settings: Settings) -> None:
    assert create_error_retry(code, settings) == retry


@pytest.mark.parametrize(
    ("node", "node_name", "stale"),
    [
        (None, "m1", False),
        ({"spec": {"providerID": "local:///z/i-new"}}, "m1", False),
        ({"spec": {"providerID": "local:///z/i-old"}}, "m1", True),
        ({"spec": {}}, "m1", False),
        ({"spec": {}}, "ip-10-0-0-1", True),
        ({"spec": {"providerID": "local:///z/i-new"}}, "ip-10-0-0-1", False),
    ],
)
def test_stale_node(node: dict[str, object] | None, node_name: str, stale: bool) -> None:
    assert is_stale_node(node, node_name, "m1", "local:///z/i-new") is stale


def test_labels_patch_sets_node_priority_and_provider_id() -> None:
    patch = labels_patch(machine(), "m1", "local:///z/i-1", target_mode=True)
    assert patch == {
        "metadata": {
            "labels": {"node": "m1"},
            "annotations": {"machinepriority.machine.sapcloud.io": "3"},
            "resourceVersion": "7",
        },
        "spec": {"providerID": "local:///z/i-1"},
    }


def test_labels_patch_keeps_an_existing_priority_and_skips_the_node_label_without_target() -> None:
    m = machine()
    m.metadata.annotations["machinepriority.machine.sapcloud.io"] = "1"
    patch = labels_patch(m, "m1", "local:///z/i-1", target_mode=False)
    assert patch == {"metadata": {"resourceVersion": "7"}, "spec": {"providerID": "local:///z/i-1"}}


def test_labels_patch_is_none_when_all_is_set() -> None:
    m = machine(providerID="local:///z/i-1")
    m.metadata.labels["node"] = "m1"
    m.metadata.annotations["machinepriority.machine.sapcloud.io"] = "3"
    assert labels_patch(m, "m1", "local:///z/i-1", target_mode=True) is None


def test_address_status_dedups_sorts_and_adds_the_hostname() -> None:
    got = address_status(
        [
            NodeAddress(type="InternalIP", address="10.0.0.2"),
            NodeAddress(type="InternalIP", address="10.0.0.2"),
        ],
        "m1",
    )
    assert [(a.type, a.address) for a in got] == [("Hostname", "m1"), ("InternalIP", "10.0.0.2")]


def test_labels_patch_keeps_an_existing_node_label_as_upstream() -> None:
    """Upstream's "status update" and "CrashLoopBackOff turns to Pending" cases: a machine whose
    ``node`` label differs from the driver's node name keeps it."""
    m = machine(providerID="local:///z/i-1")
    m.metadata.labels["node"] = "set-by-someone"
    m.metadata.annotations["machinepriority.machine.sapcloud.io"] = "3"
    assert labels_patch(m, "m1", "local:///z/i-1", target_mode=True) is None
    m.metadata.annotations.clear()
    patch = labels_patch(m, "m1", "local:///z/i-1", target_mode=True)
    assert patch is not None and "labels" not in patch["metadata"]
