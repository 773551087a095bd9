"""Sandbox API server: CPU per write of the verbs our controllers send, in process (no HTTP).

Run: ``.venv/bin/python bench/field_manager.py [--writes N] [--out NAME]``. Prints the figures and
saves them as JSON under bench/results/ (``field_manager.json`` unless ``--out``).

What it measures is the server's own work per write -- validation, defaulting, the field manager
(``metadata.managedFields``), storage and the watch event -- as CPU microseconds (process time, so
robust on a loaded host), for the write mix of a machine's life: create a Machine, patch its status
(the machine controller's ``updateMachineStatus``), patch a label, and create and update a Node.
The host calibration (CPU ms of an empty Celery task) is not needed here: no task runs; the figure
beside it is the same loop on a bare ``dict`` copy, which scales with the host the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import yaml  # noqa: E402

from mcm_sandbox.apiserver.admission import Admission  # noqa: E402
from mcm_sandbox.apiserver.handlers import Api  # noqa: E402
from mcm_sandbox.apiserver.resources import Registry  # noqa: E402
from mcm_sandbox.apiserver.store import Store  # noqa: E402
from mcm_sandbox.testing import fixtures  # noqa: E402

MERGE = "application/merge-patch+json"
MANAGER = "mcm-tasks"
# Before the field manager tracked creates, ``Api.create`` took no manager.
CREATE_KW: dict[str, Any] = {"manager": MANAGER} if "manager" in Api.create.__code__.co_varnames else {}


def _api() -> Api:
    store, registry = Store(1000), Registry()
    api = Api(store, registry, Admission(store, registry))
    ns_rt = registry.get("", "v1", "namespaces")
    crd_rt = registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    assert ns_rt is not None and crd_rt is not None
    api.create(ns_rt, None, {"metadata": {"name": fixtures.NS}})
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        api.create(crd_rt, None, yaml.safe_load(path.read_text()))
    return api


def _status(i: int) -> bytes:
    return json.dumps(
        {
            "status": {
                "currentStatus": {"phase": "Running", "lastUpdateTime": f"2026-01-01T00:00:{i % 60:02d}Z"},
                "lastOperation": {
                    "description": f"Machine is running {i}",
                    "state": "Successful",
                    "type": "Create",
                    "lastUpdateTime": f"2026-01-01T00:00:{i % 60:02d}Z",
                },
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "node": f"node-{i}",
            }
        }
    ).encode()


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "node.machine.sapcloud.io/x": "y"},
        },
        "spec": {"providerID": f"aws:///eu-west-1a/i-{name}"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "capacity": {"cpu": "4", "memory": "16Gi"},
        },
    }


def _cpu_us(fn: Any, count: int) -> float:
    began = time.process_time()
    for i in range(count):
        fn(i)
    return round((time.process_time() - began) / count * 1e6, 1)


def measure(writes: int) -> dict[str, Any]:
    api = _api()
    machines = api.registry.get("machine.sapcloud.io", "v1alpha1", "machines")
    nodes = api.registry.get("", "v1", "nodes")
    assert machines is not None and nodes is not None
    ns = fixtures.NS

    def create_machine(i: int) -> None:
        body = fixtures.machine(f"m-{i}", machine_set="ms", node=f"node-{i}", labels={"pool": "a"})
        for key in ("resourceVersion", "uid", "creationTimestamp", "generation"):
            body["metadata"].pop(key, None)
        api.create(machines, ns, body, **CREATE_KW)

    def patch_status(i: int) -> None:
        api.patch(machines, ns, f"m-{i}", _status(i), MERGE, "status", manager=MANAGER)

    def patch_label(i: int) -> None:
        body = json.dumps({"metadata": {"labels": {"node": f"n-{i}"}}}).encode()
        api.patch(machines, ns, f"m-{i}", body, MERGE, None, manager=MANAGER)

    def create_node(i: int) -> None:
        api.create(nodes, None, _node(f"node-{i}"), **CREATE_KW)

    def patch_node(i: int) -> None:
        body = json.dumps({"metadata": {"annotations": {"node.machine.sapcloud.io/seen": str(i)}}}).encode()
        api.patch(nodes, None, f"node-{i}", body, MERGE, None, manager=MANAGER)

    sample = fixtures.machine("calibrate")
    figures = {
        "create_machine_cpu_us": _cpu_us(create_machine, writes),
        "patch_machine_status_cpu_us": _cpu_us(patch_status, writes),
        "patch_machine_label_cpu_us": _cpu_us(patch_label, writes),
        "create_node_cpu_us": _cpu_us(create_node, writes),
        "patch_node_cpu_us": _cpu_us(patch_node, writes),
        "calibration_deepcopy_cpu_us": _cpu_us(lambda _: json.loads(json.dumps(sample)), writes),
    }
    stored = api.store.get(machines.storage, ns, "m-0")
    assert stored is not None
    figures["details"] = {
        "writes_per_verb": writes,
        "machine_bytes": len(json.dumps(stored.obj, separators=(",", ":"))),
        "managed_fields_entries": len(stored.meta.get("managedFields") or []),
    }
    return figures


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--out", default="field_manager.json")
    args = parser.parse_args()
    figures = measure(args.writes)
    print(json.dumps(figures, indent=2))
    (ROOT / "bench" / "results" / args.out).write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    main()
