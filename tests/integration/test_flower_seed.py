"""Flower in seed mode (issue 33), started as the chart starts it: its queue view lists each served
namespace's queues (``<prefix>:ns:<namespace>.<kind>``, learnt from what the workers consume) with
their lengths, and its task search narrows the tasks to one namespace by their args
(``args:<namespace>/``). Real redis-server, a real seed-mode worker, real Flower."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from mcm_sandbox.procs import ManagedProcess, RedisServer, free_port, wait_until
from mcm_sandbox.testing.queue import RecorderKeys, set_behaviour
from mcm_tasks.queue import enqueue
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, reset_settings
from mcm_tasks.tenancy import serving

pytestmark = pytest.mark.integration

A, B = "shoot--a", "shoot--b"


class Flower:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as resp:
            return json.loads(resp.read())

    def consumed(self) -> set[str]:
        """The queues the workers consume, as Flower learns them (``refresh=1``: asks the workers)."""
        try:
            workers = self.get("/api/workers?refresh=1")
        except (urllib.error.URLError, OSError, ValueError):
            return set()
        return {q["name"] for info in workers.values() for q in info.get("active_queues") or []}


@pytest.fixture(scope="module")
def flower(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flower]:
    workdir = tmp_path_factory.mktemp("flower-seed")
    server = RedisServer(workdir / "redis").start()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MCM_")},
        "MCM_REDIS_URL": server.url,
        "MCM_NAMESPACES": f"{A},{B}",
        "MCM_RECONCILER_MODULES": "mcm_sandbox.testing.queue:install_recorder",
        "MCM_PORT": str(free_port()),
    }
    worker = ManagedProcess(
        [sys.executable, "-m", "mcm_tasks.cli", "worker", "--queues", "machine,machineset",
         "--concurrency", "1", "--hostname", "flower-seed@%h", "--loglevel", "info"],
        workdir / "worker.log",
        env=env,
    )  # fmt: skip
    port = free_port()
    ui = ManagedProcess(
        [sys.executable, "-m", "celery", "-A", "mcm_tasks.celery_app", "flower", f"--port={port}",
         "--address=127.0.0.1"],
        workdir / "flower.log",
        env={**env, "FLOWER_UNAUTHENTICATED_API": "true"},
    )  # fmt: skip
    configure({"redis_url": server.url, "namespaces": f"{A},{B}"})
    try:
        worker.start()
        ui.start()
        f = Flower(port)
        wanted = {f"mcm:ns:{ns}.{kind}" for ns in (A, B) for kind in ("machine", "machineset")}
        logs = f"{ui.log_tail()}\n{worker.log_tail()}"
        wait_until(
            lambda: wanted <= f.consumed(),
            90,
            interval=0.5,
            what=f"Flower to see the tenants' queues:\n{logs}",
        )
        yield f
    finally:
        ui.stop()
        worker.stop()
        server.stop()
        reset_settings()


def test_the_queue_view_lists_each_namespaces_queues(flower: Flower) -> None:
    client = get_redis()
    with serving(A):
        set_behaviour(client, "machineset", "*", sleep=3)  # one worker slot: the rest wait
        for i in range(6):
            enqueue("machineset", f"{A}/set-{i}")

    def waiting() -> int:
        lengths = {q["name"]: q["messages"] for q in flower.get("/api/queues/length")["active_queues"]}
        assert f"mcm:ns:{B}.machineset" in lengths, lengths
        assert "mcm.machineset" in lengths, "the installation's own queue (empty in seed mode) too"
        return int(lengths.get(f"mcm:ns:{A}.machineset", 0))

    wait_until(lambda: waiting() >= 2, 30, interval=0.2, what="A's machineset messages waiting in Flower")
    with serving(A):
        client.hdel(RecorderKeys.make().behaviour, "machineset:*")  # the rest run at once
    with urllib.request.urlopen(flower.url + "/broker", timeout=5) as resp:
        page = resp.read().decode()
    assert f"mcm:ns:{A}.machineset" in page and "not supported" not in page


def test_the_task_search_filters_by_namespace(flower: Flower) -> None:
    with serving(B):
        enqueue("machine", f"{B}/m1")
    with serving(A):
        enqueue("machine", f"{A}/m1")

    def search(query: str) -> dict[str, Any]:
        found: dict[str, Any] = flower.get("/api/tasks?" + urllib.parse.urlencode({"search": query}))
        return found

    wait_until(lambda: len(search(f"args:{B}/")) >= 1 and len(search(f"args:{A}/m1")) >= 1, 30, interval=0.5,
               what="both machines' tasks in Flower")  # fmt: skip
    assert {t["args"] for t in search(f"args:{B}/").values()} == {repr((f"{B}/m1",))}
