"""Seed mode seen from outside (issue 33): two tenants' queue state, made by enqueueing and running
under ``tenancy.serving`` against a real Redis, read back by ``mcm-tasks admin`` (split by
namespace, one namespace at a time or all of them) and by the leading informer's ``/metrics``
(the fleet metrics labelled ``namespace``)."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from mcm_sandbox.procs import free_port
from mcm_tasks import tenancy_io
from mcm_tasks.cli import app
from mcm_tasks.queue import enqueue, register_reconciler, registry
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.queue.processing import process
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, get_settings, reset_settings
from mcm_tasks.tenancy import serving

pytestmark = pytest.mark.integration

A, B = "shoot--a", "shoot--b"
runner = CliRunner()


def boom(key: str) -> None:
    raise RuntimeError(f"cloud said no to {key}")


def deliver_one(client: redis.Redis, kind: str) -> str:
    """Take the next message of the kind's queue (the tenant's, under ``serving``) and run it."""
    raw = client.rpop(queue_keys(kind).broker_list)
    assert isinstance(raw, str), "no message"
    message = json.loads(raw)
    (key,), _, _ = json.loads(base64.b64decode(message["body"]))
    return process(kind, key, message["headers"]["id"])


@pytest.fixture()
def seed(redis_url: str) -> Iterator[redis.Redis]:
    """A seed serving A and B: A has two machines waiting and one machineset failing, B one machine
    waiting; the informer's registry names both, B with a problem."""
    configure({"redis_url": redis_url, "namespaces": f"{A},{B}", "error_backoff_base": 30})
    registry.unregister_all()
    registry.load_reconciler_modules([])
    register_reconciler("machineset", boom)
    client = get_redis()
    with serving(A):
        assert enqueue("machine", f"{A}/m1") and enqueue("machine", f"{A}/m2")
        enqueue("machineset", f"{A}/web")
        assert deliver_one(client, "machineset") == "run"
    with serving(B):
        assert enqueue("machine", f"{B}/m1")
    tenancy_io.publish(
        client,
        get_settings(),
        {A: {"since": 1700000000.0}, B: {"since": 1700000100.0, "problem": "no Secret"}},
    )
    yield client
    registry.unregister_all()
    reset_settings()


def admin(*args: str) -> Any:
    result = runner.invoke(app, ["admin", *args], terminal_width=200)
    return result


def admin_json(*args: str) -> Any:
    result = admin(*args, "--output", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_admin_queues_one_row_per_namespace_or_one_namespace(seed: redis.Redis) -> None:
    summary = admin_json("queues")
    assert [row["namespace"] for row in summary] == [A, B]
    a, b = summary
    assert (a["waiting"], a["failing"], a["adds"]) == (2, 1, 3)
    assert (b["waiting"], b["failing"], b["adds"]) == (1, 0, 1)
    assert {q["queue"]: q["waiting"] for q in a["queues"]}["machine"] == 2
    table = admin("queues")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert any(A in line for line in lines) and any("(all)" in line for line in lines)
    # one namespace: the per-queue table, as a single-namespace installation prints it
    only_b = {q["queue"]: q for q in admin_json("queues", "--namespace", B)}
    assert only_b["machine"]["waiting"] == 1 and only_b["machineset"]["failing"] == 0


def test_admin_listings_name_the_namespace(seed: redis.Redis) -> None:
    failing = admin_json("failing")
    assert [(f["namespace"], f["kind"], f["key"]) for f in failing] == [(A, "machineset", f"{A}/web")]
    assert admin_json("failing", "-n", B) == []
    table = admin("failing")
    assert "namespace" in table.stdout and f"{A}/web" in table.stdout
    assert [(d["namespace"], d["key"]) for d in admin_json("delayed")] == [(A, f"{A}/web")]  # its backoff
    assert admin_json("delayed", "-n", B) == []


def test_admin_key_commands_run_in_the_keys_namespace(seed: redis.Redis) -> None:
    found = admin_json("inspect", "machine", f"{A}/m1")
    assert found["state"] == "waiting"
    # B's key asked for in A: nothing of it there
    missing = admin("inspect", "machine", f"{B}/m1", "--namespace", A)
    assert missing.exit_code == 2 and "never queued" in missing.stderr
    assert admin_json("inspect", "machine", f"{B}/m1")["state"] == "waiting"
    # enqueue lands in the tenant's own queue
    assert admin("enqueue", "machine", f"{B}/m2").exit_code == 0
    with serving(B):
        assert seed.hexists(queue_keys("machine").pending, f"{B}/m2")
    assert not seed.hexists(queue_keys("machine").pending, f"{B}/m2"), "not under the installation's prefix"


def test_a_namespace_not_served_is_one_line_and_exit_2(seed: redis.Redis) -> None:
    for args in (("queues", "-n", "shoot--c"), ("inspect", "machine", "shoot--c/m1"), ("failing", "-n", "x")):
        result = admin(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.count("\n") == 1 and "is not served" in result.stderr, result.stderr
    result = admin("inspect", "safety", "orphan-vms")
    assert result.exit_code == 2 and "give --namespace" in result.stderr


def test_admin_seed_lists_the_registry(seed: redis.Redis) -> None:
    found = admin_json("seed")
    assert [(s["namespace"], s["since"], s["problem"]) for s in found] == [
        (A, 1700000000.0, ""),
        (B, 1700000100.0, "no Secret"),
    ]
    table = admin("seed").stdout
    assert "served" in table and "no Secret" in table


def test_fleet_metrics_are_labelled_by_namespace(seed: redis.Redis) -> None:
    from mcm_tasks.observability import serve

    port = free_port()
    server = serve(configure({**get_settings().model_dump(), "port": port, "address": "127.0.0.1"}),
                   fleet=lambda: True)  # fmt: skip
    assert server is not None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
    finally:
        server.shutdown()
    assert f'mcm_workqueue_depth{{name="machine",namespace="{A}"}} 2.0' in body
    assert f'mcm_workqueue_depth{{name="machine",namespace="{B}"}} 1.0' in body
    assert f'mcm_workqueue_failing_keys{{name="machineset",namespace="{A}"}} 1.0' in body
    assert f'mcm_workqueue_adds_total{{name="machine",namespace="{A}"}} 2.0' in body
    assert f'mcm_workqueue_work_duration_seconds_count{{name="machineset",namespace="{A}"}} 1.0' in body
    assert 'mcm_workqueue_depth{name="machine"}' not in body, "no series without the tenant"
    # the other fleet metrics too: the machine gauges of each tenant's (empty) mirror
    assert f'mcm_machine_items_total{{namespace="{A}"}}' in body
    namespaces = {line.split('namespace="')[1].split('"')[0] for line in body.splitlines()
                  if line.startswith("mcm_workqueue_") and 'namespace="' in line}  # fmt: skip
    assert namespaces == {A, B}
