"""Traces (``[otel]``, ``mcm_tasks/tracing.py``) end to end: a MachineSet scaled to 3 in the sandbox,
with every process appending its spans to one file (``MCM_TRACES_FILE``), gives 3 traces, one per
Machine, each with spans from the informer (its events and their enqueue) and from the worker (its
reconcile passes, the driver's calls and the join), and the trace id is on the Machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.kube import ops
from mcm_tasks.tracing import TRACE_ANNOTATION, trace_id_hex
from tests.e2e.support import connected, local_class, machine_set, running_sandbox

pytest.importorskip("opentelemetry.sdk.trace", reason="the [otel] extra is not installed")
pytestmark = [pytest.mark.e2e, pytest.mark.integration]

NS = "default"


@pytest.fixture(scope="module")
def spans_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tmp_path_factory.mktemp("traces")) / "spans.jsonl"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory, spans_file: Path) -> Iterator[Sandbox]:
    env = {"MCM_TRACES_FILE": str(spans_file)}
    with running_sandbox(Path(tmp_path_factory.mktemp("otel")), env, workers=1, with_beat=False) as started:
        yield started


@pytest.fixture(scope="module")
def control(sandbox: Sandbox) -> Iterator[ApiClient]:
    with connected(sandbox) as (api, _target, _redis):
        local_class(api, "otel", namespace=NS)
        yield api


def spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_scale_up_of_three_gives_three_traces_across_processes(
    sandbox: Sandbox, control: ApiClient, spans_file: Path
) -> None:
    ops.create(control, kinds.MACHINE_SET.resource, machine_set("otel", 3, "otel"))

    def machines() -> list[dict[str, Any]]:
        return list(ops.list_(control, kinds.MACHINE.resource, NS, label_selector="set=otel")["items"])

    def joined() -> bool:
        found = machines()
        return len(found) == 3 and all(
            (m.get("status") or {}).get("currentStatus", {}).get("phase") == "Running" for m in found
        )

    wait_until(joined, 120, interval=0.5, what="3 machines Running")
    expected = {trace_id_hex(m["metadata"]["uid"]): m for m in machines()}

    def by_trace() -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for span in spans(spans_file):
            found[span["context"]["trace_id"].removeprefix("0x")].append(span)
        return found

    def complete() -> bool:
        found = by_trace()
        return all({"informer event", "enqueue", "reconcile", "CreateMachine", "Join"}
                   <= {s["name"] for s in found.get(t, [])} for t in expected)  # fmt: skip

    wait_until(complete, 60, interval=0.5, what="every machine's trace to hold its spans")
    traces = by_trace()
    assert set(expected) <= set(traces)
    for trace_id, machine in expected.items():
        mine = traces[trace_id]
        services = {s["resource"]["attributes"]["service.name"] for s in mine}
        assert {"mcm-tasks-informer", "mcm-tasks-worker"} <= services, services
        names = {s["name"] for s in mine}
        assert {
            "informer event",
            "enqueue",
            "reconcile",
            "CreateMachine",
            "GetMachineStatus",
            "Join",
        } <= names
        ids = {s["context"]["span_id"] for s in mine}
        create = next(s for s in mine if s["name"] == "CreateMachine")
        assert create["parent_id"] in ids, "a driver call hangs under its reconcile pass"
        assert machine["metadata"]["annotations"][TRACE_ANNOTATION] == trace_id
    # admin why shows it, to go from the object to its trace
    name = next(iter(expected.values()))["metadata"]["name"]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MCM_")}, **sandbox.env()}
    command = [
        str(Path(sys.executable).with_name("mcm-tasks")),
        "admin",
        "why",
        f"machine/{NS}/{name}",
        "-o",
        "json",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["trace_id"] == next(iter(expected))
