"""Task shells accept exactly one key string; the worker command line is built from kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcm_tasks.kinds import QUEUES
from mcm_tasks.queue.stats import Histogram
from mcm_tasks.settings import Settings
from mcm_tasks.tasks import RECONCILE_TASKS, key_from_arguments
from mcm_tasks.worker_cli import event_heartbeat_interval, prepare_worker, queue_names, worker_argv


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        (("default/m1",), {}, "default/m1"),
        ((), {}, None),
        ((123,), {}, None),
        ((None,), {}, None),
        (("",), {}, None),
        (("a", "b"), {}, None),
        (("a",), {"extra": 1}, None),
        ((), {"key": "a"}, None),
        (("x" * 5000,), {}, None),
        ((["list"],), {}, None),
    ],
)
def test_only_one_key_string_is_accepted(
    args: tuple[Any, ...], kwargs: dict[str, Any], expected: str | None
) -> None:
    assert key_from_arguments(args, kwargs) == expected


def test_one_task_per_kind_named_after_it() -> None:
    assert sorted(RECONCILE_TASKS) == sorted(QUEUES)
    assert RECONCILE_TASKS["machine-termination"].name == "mcm.reconcile.machine-termination"


def test_queue_names_from_kinds_default_all() -> None:
    assert queue_names("") == [f"mcm.{k}" for k in QUEUES]
    assert queue_names("machine, node,mcm.bench") == ["mcm.machine", "mcm.node", "mcm.bench"]


def test_worker_argv() -> None:
    argv = worker_argv(["mcm.machine"], 3, "w1@h", "warning")
    assert argv[:3] == ["worker", "--queues", "mcm.machine"]
    assert "--task-events" in argv and "--without-mingle" in argv and "--quiet" not in argv
    assert worker_argv(["mcm.machine"], 1, "w1@h", "info", "json")[:2] == ["--quiet", "worker"], "no banner"
    threads = worker_argv(["mcm.machine"], 2, "w1@h", "info", pool="threads")
    assert threads[threads.index("--pool") + 1] == "threads", "--worker-pool reaches Celery"


def test_an_idle_worker_sends_an_event_heartbeat_every_10s_well_within_its_liveness_timeout() -> None:
    """Issue 19: Celery's 2 s heartbeat was a Redis PUBLISH every 2 s per resting worker; 10 s keeps
    Flower's online window (twice the announced interval) and /healthz (its progress) honest."""
    argv = worker_argv(["mcm.machine"], 1, "w1@h", "info", heartbeat=event_heartbeat_interval(Settings()))
    assert argv[argv.index("--heartbeat-interval") + 1] == "10"
    assert event_heartbeat_interval(Settings(liveness_timeout=20)) == 5, "a quarter of a short liveness"


def test_histogram_is_cumulative_with_inf() -> None:
    h = Histogram([0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 1], total=12.5)
    cumulative = h.cumulative()
    assert cumulative[0] == ("1e-08", 0)
    assert cumulative[5] == ("0.001", 3)
    assert cumulative[-1] == ("+Inf", 4)
    assert h.count == 4


def test_worker_flags_reach_the_celery_app(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from mcm_sandbox.apiserver.kubeconfig import write_kubeconfig
    from mcm_tasks.celery_app import app, apply_settings
    from mcm_tasks.queue.registry import ENV
    from mcm_tasks.settings import get_settings, reset_settings

    # set, then removed: so monkeypatch undoes what prepare_worker writes (delenv of an unset
    # variable records nothing, and a later sandbox's workers would inherit the value)
    monkeypatch.setenv(ENV, "")
    monkeypatch.delenv(ENV)
    try:
        kubeconfig = tmp_path / "kubeconfig"  # the worker loads it at start: a bad one stops it there
        write_kubeconfig(kubeconfig, "http://127.0.0.1:1", "t0ken")
        settings = prepare_worker(
            [
                "--reconcile-lock-ttl=10s",
                "--visibility-timeout",
                "2h",
                f"--control-kubeconfig={kubeconfig}",
                "--target-kubeconfig=none",
            ],
            "my.reconcilers",
        )
        assert settings.reconcile_lock_ttl == 10
        assert app.conf.task_time_limit == pytest.approx(9.5)
        assert app.conf.task_soft_time_limit == pytest.approx(8.0)
        assert app.conf.broker_transport_options["visibility_timeout"] == 7200
        import os

        assert os.environ[ENV] == "my.reconcilers"
    finally:
        reset_settings()
        apply_settings(get_settings())
