"""Flower, as an operator starts it, shows what the reconciles did: a failed one as FAILURE with its
error (redacted), a successful one with its outcome as the result, and the queues' lengths through
our broker transport. Real redis-server, real worker, real Flower; nothing mocked."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from mcm_sandbox.procs import ManagedProcess, RedisServer, free_port, wait_until
from mcm_sandbox.testing.queue import RecorderKeys, set_behaviour
from mcm_tasks.queue import enqueue
from mcm_tasks.queue.history import read_history
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, reset_settings

pytestmark = pytest.mark.integration

SECRET = "hunter2hunter2hunter2hunter2hunter2hunter2"


class Flower:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as resp:
            return json.loads(resp.read())

    def answers(self) -> bool:
        try:
            self.get("/api/workers?refresh=1")
            return True
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def tasks(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self.get("/api/tasks")
        return found


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("flower")


@pytest.fixture(scope="module")
def flower(workdir: Path) -> Iterator[tuple[Flower, redis.Redis]]:
    server = RedisServer(workdir / "redis").start()
    env = {
        **os.environ,
        "MCM_REDIS_URL": server.url,
        "MCM_RECONCILER_MODULES": "mcm_sandbox.testing.queue:install_recorder",
        "MCM_ERROR_BACKOFF_BASE": "30",  # a failed key waits: one failure per key in this test
        "MCM_PORT": str(free_port()),
    }
    worker = ManagedProcess(
        [sys.executable, "-m", "mcm_tasks.cli", "worker", "--queues", "machine,machineset",
         "--concurrency", "1", "--hostname", "flower-test@%h", "--loglevel", "info"],
        workdir / "worker.log",
        env=env,
    )  # fmt: skip
    port = free_port()
    # Flower 2 ignores --unauthenticated-api on the command line; it reads the environment variable
    ui = ManagedProcess(
        [sys.executable, "-m", "celery", "-A", "mcm_tasks.celery_app", "flower", f"--port={port}",
         "--address=127.0.0.1"],
        workdir / "flower.log",
        env={**env, "FLOWER_UNAUTHENTICATED_API": "true"},
    )  # fmt: skip
    configure({"redis_url": server.url, "error_backoff_base": 30})
    try:
        worker.start()
        ui.start()
        f = Flower(port)
        wait_until(f.answers, 90, interval=0.5, what=f"Flower to answer:\n{ui.log_tail()}")
        yield f, get_redis()
    finally:
        ui.stop()
        worker.stop()
        server.stop()
        reset_settings()


def _state_of(f: Flower, key: str) -> dict[str, Any] | None:
    for task in f.tasks().values():
        if task.get("args") == repr((key,)) and task.get("state") in ("SUCCESS", "FAILURE"):
            return task
    return None


def wait_done(f: Flower, *keys: str) -> None:
    wait_until(lambda: all(_state_of(f, key) is not None for key in keys), 60, interval=0.5,
               what=f"{', '.join(keys)} done in Flower")  # fmt: skip


def test_failure_shows_as_failure_with_the_redacted_error(flower: tuple[Flower, redis.Redis]) -> None:
    f, client = flower
    set_behaviour(client, "machine", "default/broken", fail=5, message=f"cloud said no; password={SECRET}")
    enqueue("machine", "default/broken")
    wait_done(f, "default/broken")
    task = _state_of(f, "default/broken")
    assert task is not None and task["state"] == "FAILURE"
    assert "InjectedFailure: cloud said no" in task["exception"]
    assert SECRET not in json.dumps(task)
    # no Celery retry, and the message is acknowledged: the contract's backoff brings the key back
    assert task["retries"] == 0
    wait_until(
        lambda: not any(task["uuid"] in str(v) for v in client.hvals("mcm:broker:unacked")),
        10,
        what="the failed task's message to be acknowledged",
    )
    # the key's own history says the same, and where it ran
    (run,) = read_history("machine", "default/broken")
    assert run.error.startswith("InjectedFailure: cloud said no") and SECRET not in run.error
    assert run.outcome.startswith("retry in 30s") and run.worker.startswith("flower-test@")


def test_success_shows_its_outcome_as_the_result(flower: tuple[Flower, redis.Redis]) -> None:
    f, client = flower
    set_behaviour(client, "machine", "default/later", requeue=15)
    enqueue("machine", "default/later")
    enqueue("machine", "default/fine")
    wait_done(f, "default/later", "default/fine")
    assert (_state_of(f, "default/later") or {})["result"] == "'requeue in 15s'"
    assert (_state_of(f, "default/fine") or {})["result"] == "'done'"
    (run,) = read_history("machine", "default/fine")
    assert run.outcome == "done" and run.duration is not None


def test_queue_lengths_through_our_transport(flower: tuple[Flower, redis.Redis]) -> None:
    f, client = flower
    # a worker of concurrency 1 runs them one by one: two or more wait for the first ~12 s, a
    # window a busy machine's Flower (each answer asks the broker) still sees into
    set_behaviour(client, "machineset", "*", sleep=3)
    for i in range(6):
        enqueue("machineset", f"default/set-{i}")

    def waiting() -> int:
        lengths = {q["name"]: q["messages"] for q in f.get("/api/queues/length")["active_queues"]}
        assert "mcm.machine" in lengths, lengths
        return int(lengths.get("mcm.machineset", 0))

    wait_until(lambda: waiting() >= 2, 30, interval=0.2, what="machineset messages waiting in Flower")
    client.hdel(RecorderKeys.make().behaviour, "machineset:*")  # the rest run at once: later tests wait less
    with urllib.request.urlopen(f.url + "/broker", timeout=5) as resp:
        page = resp.read().decode()
    assert "mcm.machineset" in page and "not supported" not in page


def test_worker_log_lines_name_kind_and_key(flower: tuple[Flower, redis.Redis], workdir: Path) -> None:
    """Celery's own lines about a reconcile (succeeded, raised) name the key as well as the task."""
    f, client = flower
    set_behaviour(client, "machine", "default/logged-bad", fail=5)
    enqueue("machine", "default/logged")
    enqueue("machine", "default/logged-bad")
    wait_done(f, "default/logged", "default/logged-bad")
    lines = (workdir / "worker.log").read_text().splitlines()
    assert any("succeeded in" in line and "machine default/logged:" in line for line in lines)
    assert any("raised expected" in line and "machine default/logged-bad:" in line for line in lines)
    assert not [line for line in lines if "succeeded in" in line and " default/" not in line]
