"""Flower's task events, batched: a real worker sends every event of every reconcile
(``task-received``, ``task-started``, ``task-succeeded``), several to a Redis PUBLISH, instead of
about one PUBLISH per task (mcm_tasks/task_events.py). Real redis-server and worker; the events are
read off Redis as any event consumer (Flower) receives them."""

from __future__ import annotations

import base64
import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
import redis

from mcm_sandbox.procs import ManagedProcess, free_port, wait_until
from mcm_tasks.queue import enqueue_many
from mcm_tasks.settings import configure, reset_settings

pytestmark = pytest.mark.integration

KEYS = 40


def _events(data: bytes) -> list[dict[str, object]]:
    """The events in one published kombu message (a batch ``task.multi`` is a list)."""
    message = json.loads(data)
    body = message["body"]
    if message.get("properties", {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    decoded = json.loads(body)
    return decoded if isinstance(decoded, list) else [decoded]


def test_every_task_event_is_sent_in_batches(redis_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "MCM_REDIS_URL": redis_url, "MCM_PORT": str(free_port()),
           "MCM_RECONCILER_MODULES": "mcm_sandbox.testing.queue:install_recorder"}  # fmt: skip
    worker = ManagedProcess(
        [sys.executable, "-m", "mcm_tasks.cli", "worker", "--queues", "machine", "--concurrency", "2",
         "--hostname", "events@%h", "--loglevel", "warning"],
        tmp_path / "worker.log", env=env,
    )  # fmt: skip
    configure({"redis_url": redis_url})
    client = redis.Redis.from_url(redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe("*celeryev*")
    publishes: Counter[str] = Counter()
    events: Counter[str] = Counter()

    def read() -> None:
        while (message := pubsub.get_message(timeout=0.05)) is not None:
            batch = [e for e in _events(message["data"]) if str(e.get("type", "")).startswith("task-")]
            if batch:
                publishes["task"] += 1
                events.update(str(e["type"]) for e in batch)

    try:
        worker.start()

        def warm() -> bool:  # the first key's events show the worker consumes and sends events
            enqueue_many([("machine", "ns/warm")])
            read()
            return events["task-succeeded"] > 0

        wait_until(warm, 60, interval=0.2, what=f"the worker's first task event:\n{worker.log_tail()}")
        publishes.clear()
        events.clear()
        enqueue_many([("machine", f"ns/m-{i}") for i in range(KEYS)])
        wait_until(lambda: read() or events["task-succeeded"] >= KEYS, 60, interval=0.05,
                   what=f"every task's events: {events}")  # fmt: skip
        wait_until(lambda: read() or events["task-started"] >= KEYS, 5, interval=0.05, what=f"{events}")
    finally:
        worker.stop()
        pubsub.close()
        client.close()
        reset_settings()
    assert events["task-received"] >= KEYS and events["task-started"] >= KEYS, "every event is sent"
    per_publish = sum(events.values()) / publishes["task"]
    assert per_publish >= 4, f"{publishes['task']} PUBLISHes for {sum(events.values())} task events"
