"""Seed mode's visibility (issue 33): which namespace an admin command reads, the seed summary of
``admin queues``, and the ``namespace`` label the fleet metrics get in seed mode, never in
single-namespace mode. The same against a real Redis with two tenants:
``tests/integration/test_seed_visibility.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from typer.testing import CliRunner

from mcm_tasks.admin.cli import seed_summary
from mcm_tasks.admin.keys import NotFound
from mcm_tasks.admin.tenants import check_served, namespace_of
from mcm_tasks.cli import app
from mcm_tasks.queue.stats import Histogram, QueueStats
from mcm_tasks.settings import configure, get_settings, reset_settings
from mcm_tasks.tenant_metrics import TenantCollector, labelled, merged

runner = CliRunner()


@pytest.fixture()
def seed() -> Iterator[None]:
    configure({"namespaces": "shoot--a,shoot--b", "redis_url": "redis://127.0.0.1:1/0"})
    yield
    reset_settings()


@pytest.fixture()
def single() -> Iterator[None]:
    configure({"namespace": "shoot--a", "redis_url": "redis://127.0.0.1:1/0"})
    yield
    reset_settings()


def test_the_namespace_is_the_flag_else_the_keys() -> None:
    assert namespace_of("shoot--a", "shoot--b/m1") == "shoot--a"
    assert namespace_of("", "shoot--b/m1") == "shoot--b"
    assert namespace_of("", "orphan-vms") == ""  # a safety job names no namespace
    assert namespace_of("", "") == ""


def test_only_a_served_namespace_is_read() -> None:
    served = ["shoot--a", "shoot--b"]
    assert check_served("shoot--b", served) == "shoot--b"
    with pytest.raises(NotFound, match="'shoot--c' is not served"):
        check_served("shoot--c", served)
    with pytest.raises(NotFound, match=r"give --namespace \(served: shoot--a, shoot--b\)"):
        check_served("", served)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["inspect", "machine", "shoot--c/m1"], "'shoot--c' is not served"),
        (["inspect", "machine", "m1"], "give --namespace"),
        (["inspect", "safety", "orphan-vms"], "give --namespace"),
        (["enqueue", "machine", "shoot--a/m1", "-n", "shoot--c"], "'shoot--c' is not served"),
        (["why", "node/n1"], "give --namespace"),
        (["why", "machine/shoot--c/m1"], "'shoot--c' is not served"),
        (["freeze", "machineset", "shoot--c/web"], "'shoot--c' is not served"),
        (["replay", "machine", "shoot--c/m1"], "'shoot--c' is not served"),
        (["release", "deployment/web"], "give --namespace"),
    ],
)
def test_seed_mode_refuses_a_namespace_it_does_not_serve(seed: None, args: list[str], message: str) -> None:
    """Refused before Redis or an API server is asked (the settings name no reachable one)."""
    result = runner.invoke(app, ["admin", *args], terminal_width=200)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr


def test_admin_seed_outside_seed_mode_says_so(single: None) -> None:
    result = runner.invoke(app, ["admin", "seed"], terminal_width=200)
    assert result.exit_code == 2 and "not in seed mode" in result.stderr and "'shoot--a'" in result.stderr


def test_the_seed_flags_of_the_admin_command() -> None:
    try:
        result = runner.invoke(app, ["admin", "--namespaces", "shoot--a", "inspect", "machine", "shoot--c/x"])
        assert result.exit_code == 2 and "'shoot--c' is not served" in result.stderr
        assert get_settings().seed_mode
    finally:
        reset_settings()


def _stats(kind: str, pending: int, failing: int) -> QueueStats:
    empty = Histogram([0] * 12, 0.0)
    return QueueStats(kind=kind, queued_messages=pending, pending=pending, delayed=0, running=0, dirty=0,
                      failing=failing, quarantined=0, adds=pending + failing, retries=failing, recovered=0,
                      unfinished_seconds=0.0, longest_running_seconds=0.0, queue_duration=empty,
                      work_duration=empty)  # fmt: skip


def test_the_seed_summary_sums_each_namespaces_queues() -> None:
    summary = seed_summary(
        [
            ("shoot--a", [_stats("machine", 3, 1), _stats("machineset", 2, 0)]),
            ("shoot--b", [_stats("machine", 0, 0)]),
        ]
    )
    assert [(s["namespace"], s["waiting"], s["failing"], s["adds"]) for s in summary] == [
        ("shoot--a", 5, 1, 6),
        ("shoot--b", 0, 0, 0),
    ]
    assert [q["queue"] for q in summary[0]["queues"]] == ["machine", "machineset"]


def test_a_sample_gets_the_namespace_unless_it_names_its_own() -> None:
    depth = GaugeMetricFamily("mcm_workqueue_depth", "depth", labels=["name"])
    depth.add_metric(["machine"], 2)
    phase = GaugeMetricFamily("mcm_machine_current_status_phase", "phase", labels=["name", "namespace"])
    phase.add_metric(["m1", "shoot--a"], 1)
    assert [s.labels for s in labelled(depth, "shoot--a").samples] == [
        {"name": "machine", "namespace": "shoot--a"}
    ]
    assert [s.labels for s in labelled(phase, "shoot--b").samples] == [
        {"name": "m1", "namespace": "shoot--a"}
    ]
    assert depth.samples[0].labels == {"name": "machine"}, "the family read is not changed"


def test_families_of_all_tenants_merge_by_name() -> None:
    def families(n: float) -> list[Metric]:
        adds = CounterMetricFamily("mcm_workqueue_adds", "adds", labels=["name"])
        adds.add_metric(["machine"], n)
        work = HistogramMetricFamily("mcm_workqueue_work_duration_seconds", "work", labels=["name"])
        work.add_metric(["machine"], [("1.0", 1), ("+Inf", 2)], n)
        return [adds, work]

    found = merged([("shoot--a", families(1)), ("shoot--b", families(2))])
    assert [f.name for f in found] == ["mcm_workqueue_adds", "mcm_workqueue_work_duration_seconds"]
    assert [(s.labels["namespace"], s.value) for s in found[0].samples] == [("shoot--a", 1), ("shoot--b", 2)]
    # a tenant's histogram samples stay together
    assert [s.labels["namespace"] for s in found[1].samples] == ["shoot--a"] * 4 + ["shoot--b"] * 4


class PrefixCollector(Collector):
    """A fleet collector that reports the key prefix it ran under (what a real one reads Redis by)."""

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("mcm_workqueue_depth", "depth", labels=["name"])
        family.add_metric([get_settings().key_prefix], 1)
        yield family


def _scrape(collector: Collector) -> str:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_single_namespace_mode_has_no_namespace_label(single: None) -> None:
    text = _scrape(TenantCollector(PrefixCollector()))
    assert 'mcm_workqueue_depth{name="mcm"} 1.0' in text
    assert "namespace=" not in text


def test_seed_mode_reads_each_served_namespace_under_its_prefix(seed: None) -> None:
    text = _scrape(TenantCollector(PrefixCollector()))
    assert 'mcm_workqueue_depth{name="mcm:ns:shoot--a",namespace="shoot--a"} 1.0' in text
    assert 'mcm_workqueue_depth{name="mcm:ns:shoot--b",namespace="shoot--b"} 1.0' in text
    assert 'name="mcm"' not in text, "nothing read under the installation's prefix"


def test_one_tenants_failing_scrape_leaves_the_others(seed: None) -> None:
    class Picky(Collector):
        def collect(self) -> Iterator[Metric]:
            if get_settings().namespace == "shoot--a":
                raise ValueError("an unreadable object")
            yield from PrefixCollector().collect()

    text = _scrape(TenantCollector(Picky()))
    assert 'namespace="shoot--b"' in text and 'namespace="shoot--a"' not in text


def test_held_across_namespaces_skips_one_whose_secrets_are_broken(
    seed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcm_tasks.admin import holds
    from mcm_tasks.kube.target_secret import TargetSecretError

    def list_held(namespace: str | None = None) -> list[holds.Held]:
        if namespace == "shoot--a":
            raise TargetSecretError("Secret shoot--a/generic-token-kubeconfig: not found")
        return [holds.Held(namespace=get_settings().namespace, machine="m1", deployment="web", node="n1",
                           reason="storm", since="", message="")]  # fmt: skip

    monkeypatch.setattr(holds, "list_held", list_held)
    result = runner.invoke(app, ["admin", "held", "--output", "json"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert [h["namespace"] for h in json.loads(result.stdout)] == ["shoot--b"]
    assert "warning: shoot--a not read: Secret shoot--a/generic-token-kubeconfig" in result.stderr
    refused = runner.invoke(app, ["admin", "held", "-n", "shoot--a"], terminal_width=200)
    assert refused.exit_code == 2 and "generic-token-kubeconfig" in refused.stderr
