"""The endpoints every process serves, against a real Redis (the queue collector reads it)."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcm_sandbox.procs import ManagedProcess, RedisServer, free_port, wait_until
from mcm_tasks.observability import MULTIPROC_ENV, serve
from mcm_tasks.probes import LEADING, PROGRESS, standard_probes
from mcm_tasks.queue import enqueue
from mcm_tasks.settings import configure, reset_settings

pytestmark = pytest.mark.integration


@pytest.fixture()
def endpoint(redis_url: str) -> Iterator[str]:
    port = free_port()
    settings = configure({"redis_url": redis_url, "port": port, "address": "127.0.0.1"})
    server = serve(settings, fleet=lambda: True)
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
    status, body = _get(f"{endpoint}/healthz")
    assert status == 200 and json.loads(body)["ok"] is True
    status, body = _get(f"{endpoint}/configz")
    shown = json.loads(body)
    assert status == 200 and shown["machine_health_timeout"] == 600
    assert redis_url not in body and shown["redis_url"] == "<hidden>"
    assert _get(f"{endpoint}/nothing")[0] == 404


def test_fleet_metrics_only_where_fleet_says_so(redis_url: str) -> None:
    """A process that does not lead leaves the fleet gauges out, so sums over pods count them once."""
    leading = {"now": False}
    port = free_port()
    server = serve(
        configure({"redis_url": redis_url, "port": port, "address": "127.0.0.1"}),
        fleet=lambda: leading["now"],
    )
    assert server is not None
    LEADING["informer"] = False
    try:
        body = _get(f"http://127.0.0.1:{port}/metrics")[1]
        assert "mcm_machine_items_total" not in body and "mcm_workqueue_depth" not in body
        assert 'mcm_leader{component="informer"} 0.0' in body
        leading["now"] = LEADING["informer"] = True
        body = _get(f"http://127.0.0.1:{port}/metrics")[1]
        assert "mcm_machine_items_total" in body and "mcm_workqueue_delayed_keys" in body
        assert 'mcm_leader{component="informer"} 1.0' in body
    finally:
        LEADING.clear()
        server.shutdown()
        reset_settings()


def test_redis_down_metrics_answer_readyz_fails_healthz_waits() -> None:
    """Nothing listens on the Redis port: /metrics still answers (without the Redis-read series),
    /readyz says Redis is unreachable, /healthz does not call a loop that waits for Redis wedged."""
    port = free_port()
    settings = configure(
        {
            "redis_url": f"redis://127.0.0.1:{free_port()}/0",
            "port": port,
            "address": "127.0.0.1",
            "liveness_timeout": 0.1,
        }
    )
    server = serve(settings, standard_probes(settings, apiserver=False), fleet=lambda: True)
    assert server is not None
    try:
        status, body = _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and "mcm_workqueue_depth" not in body
        status, body = _get(f"http://127.0.0.1:{port}/readyz")
        assert status == 503 and json.loads(body)["checks"]["redis"]["ok"] is False
        PROGRESS.beat("test-loop")
        wait_until(lambda: bool(PROGRESS.stalled(0.1)), 5, what="the loop to stall")
        status, body = _get(f"http://127.0.0.1:{port}/healthz")
        assert status == 200 and json.loads(body)["stalled"], "waiting for Redis is not wedged"
    finally:
        PROGRESS.forget("test-loop")
        server.shutdown()
        reset_settings()


def test_a_stalled_loop_fails_healthz_while_redis_answers(redis_url: str) -> None:
    port = free_port()
    settings = configure(
        {"redis_url": redis_url, "port": port, "address": "127.0.0.1", "liveness_timeout": 0.2}
    )
    server = serve(settings, standard_probes(settings, apiserver=False))
    assert server is not None
    try:
        PROGRESS.beat("test-loop")
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        assert _get(f"http://127.0.0.1:{port}/readyz")[0] == 200
        wait_until(lambda: _get(f"http://127.0.0.1:{port}/healthz")[0] == 503, 5, what="/healthz to fail")
        assert "test-loop" in json.loads(_get(f"http://127.0.0.1:{port}/healthz")[1])["stalled"]
        PROGRESS.beat("test-loop")
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    finally:
        PROGRESS.forget("test-loop")
        server.shutdown()
        reset_settings()


def start_worker(redis_url: str, logs: Path, *flags: str) -> tuple[ManagedProcess, int]:
    """A real ``mcm-tasks worker`` on the machine queue (the metrics test reconciler), started; its
    endpoint port."""
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k != MULTIPROC_ENV and not k.startswith("MCM_")},
        "MCM_REDIS_URL": redis_url,
        "MCM_PORT": str(port),
        "MCM_ADDRESS": "127.0.0.1",
        "MCM_RECONCILER_MODULES": "tests.integration.metrics_reconciler",
    }
    cmd = [
        sys.executable,
        "-m",
        "mcm_tasks.cli",
        "worker",
        "--queues",
        "machine",
        "--concurrency",
        "1",
        *flags,
    ]
    worker = ManagedProcess(cmd, logs / "worker.log", env=env)
    worker.start()
    return worker, port


def test_worker_readyz_follows_redis(tmp_path: Path) -> None:
    """A real worker: /readyz fails within 10 s of Redis going away and recovers after it is back;
    /metrics answers throughout."""
    server = RedisServer(tmp_path / "redis").start()
    worker, port = start_worker(server.url, tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _status(f"{url}/readyz") == 200, 60, interval=0.2, what="worker ready")
        assert _status(f"{url}/healthz") == 200
        server.stop()
        gone = time.monotonic()
        wait_until(lambda: _status(f"{url}/readyz") == 503, 10, interval=0.2, what="/readyz to fail")
        assert time.monotonic() - gone < 10
        assert _status(f"{url}/metrics") == 200 and _status(f"{url}/healthz") == 200
        server.start()
        wait_until(lambda: _status(f"{url}/readyz") == 200, 30, interval=0.2, what="/readyz to recover")
        assert worker.alive()
    finally:
        worker.stop()
        server.stop()


def test_worker_logs_json_with_kind_and_key(redis_url: str, tmp_path: Path) -> None:
    """``--log-format json``: one JSON object per line, and a reconcile's lines carry kind and key."""
    worker, _ = start_worker(redis_url, tmp_path, "--log-format", "json")
    configure({"redis_url": redis_url})
    try:
        enqueue("machine", "default/json-1")

        def lines() -> list[dict[str, object]]:
            text = (tmp_path / "worker.log").read_text()
            return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

        wait_until(lambda: any(e.get("key") == "default/json-1" for e in lines()), 60, what="a JSON line")
        about = [e for e in lines() if e.get("key") == "default/json-1"]
        text = (tmp_path / "worker.log").read_text().splitlines()
        # no text log line and no banner (a root-privilege warning printed before logging starts may
        # remain when the tests run as root)
        assert not [line for line in text if line.startswith(("[", " -------", "celery@"))]
        assert all(e["kind"] == "machine" for e in about)
        assert any("succeeded" in str(e["message"]) for e in about)
    finally:
        worker.stop()
        reset_settings()


def _status(url: str) -> int | None:
    try:
        return _get(url)[0]
    except (urllib.error.URLError, OSError):
        return None


def test_a_taken_port_is_not_fatal(endpoint: str) -> None:
    port = int(endpoint.rsplit(":", 1)[1])
    assert serve(configure({"port": port, "address": "127.0.0.1"})) is None


def test_worker_serves_metrics_recorded_in_its_pool_processes(redis_url: str, tmp_path: Path) -> None:
    """The reconcile runs in a forked pool process; without multiprocess mode its counter would
    never show in the main process's /metrics. (The threads pool, the default, runs it in the main
    process itself.)"""
    worker, port = start_worker(redis_url, tmp_path, "--worker-pool=prefork")
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
