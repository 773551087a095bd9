"""Force-drain conditions, effective timeout and eviction retries (drain_force), as tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_tasks.api import Machine
from mcm_tasks.controllers.machine.descriptions import INITIATE_DRAIN
from mcm_tasks.controllers.machine.drain import force as df
from mcm_tasks.settings import Settings, load_settings

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def settings(**overrides: Any) -> Settings:
    base = {
        "machine_drain_timeout": "2h",
        "machine_max_evict_retries": 360,
        "pod_eviction_retry_interval": "20s",
        "force_drain_unhealthy_after": "5m",
        "force_drain_timeout": "1m",
    }
    return load_settings({**base, **overrides})


def machine(
    *,
    labels: dict[str, str] | None = None,
    deleted_ago: float | None = 10,
    conditions: list[dict[str, Any]] | None = None,
    spec: dict[str, Any] | None = None,
) -> Machine:
    meta: dict[str, Any] = {"name": "m", "namespace": "default", "labels": labels or {}}
    if deleted_ago is not None:
        meta["deletionTimestamp"] = (NOW - timedelta(seconds=deleted_ago)).isoformat()
    return Machine.model_validate(
        {"metadata": meta, "spec": spec or {}, "status": {"conditions": conditions or []}}
    )


def cond(type_: str, status: str, ago: float) -> dict[str, Any]:
    return {"type": type_, "status": status, "lastTransitionTime": (NOW - timedelta(seconds=ago)).isoformat()}


def node(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "status": {"conditions": list(conditions)}}


@pytest.mark.parametrize(
    ("value", "forced"),
    [
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("t", True),
        ("T", True),
        ("1", True),
        ("false", False),
        ("yes", False),
        ("", False),
        ("tRuE", False),
        (None, False),
    ],
)
def test_force_deletion_label_accepts_any_boolean_true(value: str | None, forced: bool) -> None:
    labels = {} if value is None else {"force-deletion": value}
    reason, shorten = df.force_reason(machine(labels=labels), None, NOW, settings())
    assert bool(reason) is forced
    assert shorten is forced


@pytest.mark.parametrize(
    ("deleted_ago", "own_timeout", "forced"),
    [
        (10, None, False),
        (7199, None, False),
        (7201, None, True),
        (61, "1m", True),
        (59, "1m", False),
        (None, None, False),
    ],
)
def test_drain_timeout_from_deletion_timestamp(
    deleted_ago: float | None, own_timeout: str | None, forced: bool
) -> None:
    spec = {"drainTimeout": own_timeout} if own_timeout else {}
    reason, shorten = df.force_reason(machine(deleted_ago=deleted_ago, spec=spec), None, NOW, settings())
    assert bool(reason) is forced
    assert shorten is forced
    if forced:
        assert "drain timeout" in reason


@pytest.mark.parametrize(
    ("conditions", "forced"),
    [
        ([cond("Ready", "True", 9999)], False),
        ([cond("Ready", "False", 301)], True),
        ([cond("Ready", "False", 299)], False),
        ([cond("Ready", "Unknown", 301)], True),
        ([cond("ReadonlyFilesystem", "True", 301)], True),
        ([cond("ReadonlyFilesystem", "Unknown", 301)], True),
        ([cond("ReadonlyFilesystem", "False", 9999)], False),
        ([cond("ReadonlyFilesystem", "True", 100)], False),
        ([cond("DiskPressure", "True", 9999)], False),
        ([], False),
        ([{"type": "Ready", "status": "False"}], False),  # no transition time: cannot tell how long
    ],
)
def test_unhealthy_node_forces_without_shortening(conditions: list[dict[str, Any]], forced: bool) -> None:
    # read from the Node when there is one …
    reason, shorten = df.force_reason(machine(), node(*conditions), NOW, settings())
    assert bool(reason) is forced
    assert shorten is False
    # … and from the machine's copy of the conditions otherwise
    reason, _ = df.force_reason(machine(conditions=conditions), None, NOW, settings())
    assert bool(reason) is forced


def test_node_conditions_win_over_the_machines_stale_copy() -> None:
    stale = machine(conditions=[cond("Ready", "True", 9999)])
    reason, _ = df.force_reason(stale, node(cond("Ready", "False", 600)), NOW, settings())
    assert "NotReady" in reason


def test_unhealthy_after_is_configurable() -> None:
    m = machine(conditions=[cond("Ready", "False", 31)])
    assert df.force_reason(m, None, NOW, settings(force_drain_unhealthy_after="30s"))[0]
    assert not df.force_reason(m, None, NOW, settings())[0]


@pytest.mark.parametrize(
    ("spec", "overrides", "timeout", "retries"),
    [
        ({}, {}, 7200.0, 360),  # min(360, 7200/20=360)
        ({"drainTimeout": "10m"}, {}, 600.0, 30),  # 600/20
        ({"maxEvictRetries": 5}, {}, 7200.0, 5),
        ({}, {"machine_max_evict_retries": 3}, 7200.0, 3),
        ({"drainTimeout": "10s"}, {}, 10.0, 0),  # shorter than one retry interval: delete at once
        ({"drainTimeout": "garbage"}, {}, 7200.0, 360),  # unreadable: the flag
        ({}, {"machine_drain_timeout": "5s", "pod_eviction_retry_interval": "0.5s"}, 5.0, 10),
    ],
)
def test_effective_timeout_and_retries(
    spec: dict[str, Any], overrides: dict[str, Any], timeout: float, retries: int
) -> None:
    params = df.drain_params(machine(spec=spec, deleted_ago=1), None, NOW, settings(**overrides))
    assert params.timeout == timeout
    assert params.max_evict_retries == retries
    assert not params.force


@pytest.mark.parametrize(
    ("m", "n", "timeout", "retries"),
    [
        (machine(labels={"force-deletion": "true"}), None, 60.0, 1),
        (machine(deleted_ago=7300), None, 60.0, 1),
        (machine(), node(cond("Ready", "False", 600)), 7200.0, 360),  # forced, not shortened
    ],
)
def test_forced_params(m: Machine, n: dict[str, Any] | None, timeout: float, retries: int) -> None:
    params = df.drain_params(m, n, NOW, settings())
    assert params.force
    assert (params.timeout, params.max_evict_retries) == (timeout, retries)


@pytest.mark.parametrize(
    ("m", "n", "due"),
    [
        (machine(deleted_ago=7000), None, 200.0),
        (machine(deleted_ago=7000), node(cond("Ready", "False", 250)), 50.0),
        (machine(deleted_ago=None), None, None),
        (machine(deleted_ago=8000), None, None),  # already past: nothing pending
        (machine(deleted_ago=None), node(cond("ReadonlyFilesystem", "True", 200)), 100.0),
    ],
)
def test_force_due_in(m: Machine, n: dict[str, Any] | None, due: float | None) -> None:
    found = df.force_due_in(m, n, NOW, settings())
    assert found == (pytest.approx(due) if due is not None else None)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2025-01-01T12:00:00Z", NOW),
        ("2025-01-01T12:00:00+00:00", NOW),
        ("2025-01-01T12:00:00", NOW),
        (NOW, NOW),
        ("yesterday", None),
        (None, None),
        (12, None),
    ],
)
def test_parse_time(raw: Any, expected: datetime | None) -> None:
    assert df.parse_time(raw) == expected


@pytest.mark.parametrize(
    "description",
    [
        pytest.param("Drain failed due to - pdb blocks eviction. Will retry in next sync. " + INITIATE_DRAIN,
                     id="Drain machine failure before drain timeout, hence deletion fails"),
        pytest.param("Drain failed due to failure in update of node conditions - 500. Will retry in next "
                     "sync. " + INITIATE_DRAIN, id="node conditions update failed"),
    ],
)  # fmt: skip
def test_a_failed_drain_does_not_force_the_next(description: str) -> None:
    """The seeds list "the last drain failed" as a third force reason; upstream dropped it in #373
    ("Avoid force-deleting if previous drain has failed"): a drain refused by a PodDisruptionBudget
    would otherwise delete the budget's pods on the very next pass. Kept out on purpose; only the
    label, the drain timeout and an unhealthy node force a drain."""
    m = machine(deleted_ago=60)
    m.status.last_operation.description = description
    m.status.last_operation.state = "Failed"
    params = df.drain_params(m, node(cond("Ready", "True", 3600)), NOW, settings())
    assert not params.force and params.force_reason == ""
    assert params.max_evict_retries == 360
