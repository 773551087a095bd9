"""The endpoints every process serves, against a real Redis (the queue collector reads it)."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcm_sandbox.procs import ManagedProcess, free_port, wait_until
from mcm_tasks.observability import MULTIPROC_ENV, serve
from mcm_tasks.queue import enqueue
from mcm_tasks.settings import configure, reset_settings

pytestmark = pytest.mark.integration


@pytest.fixture()
def endpoint(redis_url: str) -> Iterator[str]:
    port = free_port()
    settings = configure({"redis_url": redis_url, "port": port, "address": "127.0.0.1"})
    server = serve(settings)
    assert server is not None
    yield f"http://127.0.0.1:{port}"
    server.shutdown()
    reset_settings()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_metrics_carry_mcm_names(endpoint: str) -> None:
    status, body = _get(f"{endpoint}/metrics")
    assert status == 200
    assert "mcm_workqueue_depth" in body
    assert "mcm_machine_items_total" in body


def test_healthz_and_configz_hide_the_redis_url(endpoint: str, redis_url: str) -> None:
    assert _get(f"{endpoint}/healthz") == (200, "ok")
    status, body = _get(f"{endpoint}/configz")
    shown = json.loads(body)
    assert status == 200 and shown["machine_health_timeout"] == 600
    assert redis_url not in body and shown["redis_url"] == "<hidden>"
    assert _get(f"{endpoint}/nothing")[0] == 404


def test_a_taken_port_is_not_fatal(endpoint: str) -> None:
    port = int(endpoint.rsplit(":", 1)[1])
    assert serve(configure({"port": port, "address": "127.0.0.1"})) is None


def test_worker_serves_metrics_recorded_in_its_pool_processes(redis_url: str, tmp_path: Path) -> None:
    """The reconcile runs in a forked pool process; without multiprocess mode its counter would
    never show in the main process's /metrics."""
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k != MULTIPROC_ENV},
        "MCM_REDIS_URL": redis_url,
        "MCM_PORT": str(port),
        "MCM_ADDRESS": "127.0.0.1",
        "MCM_RECONCILER_MODULES": "tests.integration.metrics_reconciler",
    }
    cmd = [sys.executable, "-m", "mcm_tasks.cli", "worker", "--queues", "machine", "--concurrency", "1"]
    worker = ManagedProcess(cmd, tmp_path / "worker.log", env=env)
    worker.start()
    try:
        configure({"redis_url": redis_url})
        wait_until(lambda: _scrape(port) is not None, 60, what="worker /metrics")
        enqueue("machine", "default/m1")

        def counted() -> bool:
            body = _scrape(port) or ""
            return "mcm_test_reconciles_total 1.0" in body

        wait_until(counted, 60, interval=0.2, what="the pool process's counter in /metrics")
        metrics_dir = _environ_of(worker.pid)[MULTIPROC_ENV]
        assert Path(metrics_dir).is_dir()
    finally:
        worker.stop()
        reset_settings()
    # the worker made its metrics directory for itself and takes it away when it stops
    assert not Path(metrics_dir).exists()


def _environ_of(pid: int) -> dict[str, str]:
    """A process's environment as it was exec'd (the worker re-execs itself with the directory)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {k.decode(): v.decode(errors="replace") for k, _, v in pairs}


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            return str(resp.read().decode())
    except (urllib.error.URLError, OSError):
        return None
