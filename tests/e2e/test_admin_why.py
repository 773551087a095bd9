"""``mcm-tasks admin why``, run as an operator runs it (the console script in a subprocess) against a live
sandbox (real Redis, the sandbox API servers, a real worker): a settled set, its machine and its Node;
a set held up by machines whose Nodes never join, named with what each waits for; a frozen set; a
set failing on API-server faults; and bad input answered with one line and exit 2."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.kube import ops
from tests.e2e.support import connected, faults, machine_set, running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

MCM_TASKS = str(Path(sys.executable).with_name("mcm-tasks"))
NS = "default"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    env = {"MCM_ERROR_BACKOFF_BASE": "0.5", "MCM_ERROR_BACKOFF_MAX": "2s"}
    with running_sandbox(Path(tmp_path_factory.mktemp("why")), env, workers=1, with_beat=False) as started:
        yield started


@pytest.fixture(scope="module")
def control(sandbox: Sandbox) -> Iterator[ApiClient]:
    with connected(sandbox) as (api, _target, _redis):
        user_data = base64.b64encode(b"#!/bin/sh\n").decode()
        secret = {"metadata": {"name": "why-secret", "namespace": NS}, "data": {"userData": user_data}}
        ops.create(api, kinds.SECRET.resource, secret)
        for name, spec in (("why-ok", {}), ("why-stuck", {"neverJoin": True})):
            ops.create(api, kinds.MACHINE_CLASS.resource, {
                "apiVersion": API_VERSION, "kind": "MachineClass",
                "metadata": {"name": name, "namespace": NS}, "provider": "local", "providerSpec": spec,
                "secretRef": {"name": "why-secret", "namespace": NS},
            })  # fmt: skip
        yield api


def admin(sandbox: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MCM_")}, **sandbox.env()}
    done = subprocess.run([MCM_TASKS, "admin", *args], env=env, capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


def why(sandbox: Sandbox, target: str) -> Any:
    done = admin(sandbox, "why", target, "--output", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def machines_of(api: ApiClient, set_name: str) -> list[dict[str, Any]]:
    items = ops.list_(api, kinds.MACHINE.resource, NS, label_selector=f"set={set_name}")["items"]
    return list(items)


def test_a_settled_set_its_machine_and_its_node(sandbox: Sandbox, control: ApiClient) -> None:
    ops.create(control, kinds.MACHINE_SET.resource, machine_set("why-run", 1, "why-ok"))

    def running() -> bool:
        found = machines_of(control, "why-run")
        return bool(found) and all(
            (m.get("status") or {}).get("currentStatus", {}).get("phase") == "Running" for m in found
        )

    wait_until(running, 90, interval=0.5, what="the set's machine to run")
    wait_until(lambda: not why(sandbox, f"machineset/{NS}/why-run")["holders"]
               and why(sandbox, f"machineset/{NS}/why-run")["status"].startswith("1/1 ready"),
               60, interval=0.5, what="the set to settle")  # fmt: skip
    found = why(sandbox, f"machineset/{NS}/why-run")
    assert found["kind"] == "machineset" and found["namespace"] == NS and found["name"] == "why-run"
    assert found["queue"] and found["queue"][0]["kind"] == "machineset"
    assert any(r["end"] and r["outcome"] for r in found["queue"][0]["history"])
    assert any(e["reason"] == "SuccessfulCreate" for e in found["events"]), found["events"]

    (machine,) = machines_of(control, "why-run")
    name = machine["metadata"]["name"]
    node = machine["metadata"]["labels"]["node"]
    about = why(sandbox, f"machine/{NS}/{name}")
    assert about["status"].startswith("phase Running"), about
    assert "Creating" not in {c["type"] for c in about["conditions"]}
    assert {c["type"] for c in about["conditions"]} >= {"Ready"}
    assert about["queue"] and about["queue"][0]["kind"] == "machine"
    assert about["waits"]
    node_why = why(sandbox, f"node/{node}")
    assert node_why["kind"] == "node" and node_why["status"].startswith("Ready")
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in node_why["conditions"])

    table = admin(sandbox, "why", f"machine/{NS}/{name}")
    assert table.returncode == 0
    assert f"machine {NS}/{name}: phase Running" in table.stdout and "waits for:" in table.stdout
    assert "queue machine:" in table.stdout


def test_a_held_up_set_names_its_machines_and_a_freeze(sandbox: Sandbox, control: ApiClient) -> None:
    ops.create(control, kinds.MACHINE_SET.resource, machine_set("why-stuck", 2, "why-stuck"))

    def holders() -> list[dict[str, Any]]:
        found = why(sandbox, f"machineset/{NS}/why-stuck")["holders"]
        return [h for h in found if h["waits_for"] == "waiting for Node"]

    wait_until(lambda: len(holders()) == 2, 90, interval=0.5, what="both machines to wait for their Nodes")
    names = {m["metadata"]["name"] for m in machines_of(control, "why-stuck")}
    assert {h["name"] for h in holders()} == names
    assert all(h["phase"] == "Pending" for h in holders())
    for m in machines_of(control, "why-stuck"):
        found = {c["type"]: c for c in m["status"].get("conditions") or []}
        assert found["Creating"]["status"] == "True" and found["Creating"]["reason"] == "WaitingForNode", (
            found
        )

    def scaling_up() -> dict[str, Any]:
        stuck = ops.get(control, kinds.MACHINE_SET.resource, "why-stuck", NS) or {}
        found = {c["type"]: c for c in (stuck.get("status") or {}).get("machineSetCondition") or []}
        return dict(found.get("ScalingUp") or {})

    # The set recounts its machines at most once per --machine-set-recount-interval (5 s) while
    # nothing changes its counts, so its condition may still say "creating VM" for a few seconds
    # after the machines themselves say they wait for their Nodes.
    wait_until(
        lambda: "waiting for Node" in scaling_up().get("message", ""),
        30,
        interval=0.5,
        what="the set's ScalingUp condition to name the Nodes its machines wait for",
    )
    up = scaling_up()
    assert up["status"] == "True" and "2 machines Pending" in up["message"]
    table = admin(sandbox, "why", f"machineset/{NS}/why-stuck")
    assert "machines holding it up:" in table.stdout and "waiting for Node" in table.stdout
    assert "2 machine(s) not serving" in table.stdout

    assert admin(sandbox, "freeze", "machineset", f"{NS}/why-stuck").returncode == 0
    frozen = why(sandbox, f"machineset/{NS}/why-stuck")
    assert frozen["frozen"] is True
    assert any(line.startswith("frozen") for line in frozen["waits"])


def test_a_failing_set_says_so(sandbox: Sandbox, control: ApiClient) -> None:
    faults(sandbox, {"action": "error", "status_code": 500, "verbs": ["create"], "resources": ["machines"]})
    try:
        ops.create(control, kinds.MACHINE_SET.resource, machine_set("why-fail", 1, "why-ok"))

        def failing() -> list[str]:
            return [w for w in why(sandbox, f"machineset/{NS}/why-fail")["waits"] if "failing on queue" in w]

        wait_until(lambda: bool(failing()), 60, interval=0.5, what="why to say the set is failing")
        assert "machineset" in failing()[0]
    finally:
        faults(sandbox, None)


def test_bad_input_is_one_line_and_exit_2(sandbox: Sandbox, control: ApiClient) -> None:
    for target, text in (
        ("pods/default/x", "cannot explain 'pods'"),
        ("machine", "is not KIND/NAMESPACE/NAME"),
        (f"machine/{NS}/nothing", "no machine default/nothing"),
        ("node/nothing", "no node nothing"),
    ):
        done = admin(sandbox, "why", target)
        assert done.returncode == 2, (target, done.stdout, done.stderr)
        assert done.stderr.startswith("error: ") and text in done.stderr, done.stderr


def test_only_redis_is_needed_for_the_queue_part(sandbox: Sandbox, control: ApiClient) -> None:
    """An unreachable Redis is one line and exit 1, never a traceback."""
    done = admin(sandbox, "--redis-url", "redis://127.0.0.1:1/0", "why", f"machineset/{NS}/why-run")
    assert done.returncode == 1 and done.stderr.startswith("error: cannot reach Redis"), done.stderr


KUBECTL = str(Path(sys.executable).with_name("kubectl"))


def deployment_body(name: str, replicas: int, class_name: str) -> dict[str, Any]:
    labels = {"deployment": name}
    return {
        "apiVersion": API_VERSION, "kind": "MachineDeployment", "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "progressDeadlineSeconds": 5, "selector": {"matchLabels": labels},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"class": {"kind": "MachineClass", "name": class_name}}}},
    }  # fmt: skip


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def kstatus(obj: dict[str, Any]) -> str:
    """kstatus' generic rules for a custom resource: InProgress until the generation is observed or
    while Reconciling is True, Failed while Stalled is True, else Current."""
    found = conditions(obj)
    if (obj.get("status") or {}).get("observedGeneration") != obj["metadata"].get("generation"):
        return "InProgress"
    if found.get("Stalled", {}).get("status") == "True":
        return "Failed"
    if found.get("Reconciling", {}).get("status") == "True":
        return "InProgress"
    return "Current"


def test_a_rollout_is_available_current_and_a_stalled_one_names_its_machines(
    sandbox: Sandbox, control: ApiClient
) -> None:
    ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, deployment_body("why-md", 2, "why-ok"))

    def read() -> dict[str, Any]:
        found = ops.get(control, kinds.MACHINE_DEPLOYMENT.resource, "why-md", NS)
        assert found is not None
        return found

    wait = subprocess.run(
        [KUBECTL, "--kubeconfig", str(sandbox.kubeconfig), "-n", NS, "wait", "--for=condition=Available",
         "machinedeployment/why-md", "--timeout=90s"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert wait.returncode == 0, wait.stderr
    wait_until(lambda: kstatus(read()) == "Current", 90, interval=0.5, what="kstatus Current: rolled out")
    settled = read()
    assert settled["status"]["observedGeneration"] == settled["metadata"]["generation"]
    assert settled["status"]["availableReplicas"] == 2
    assert conditions(settled)["Available"]["status"] == "True"
    assert conditions(settled)["RollingOut"]["status"] == "False"

    # a new template whose Nodes never join: the rollout stalls on its first new machine
    patch = {"spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": "why-stuck"}}}}}
    ops.patch(control, kinds.MACHINE_DEPLOYMENT.resource, "why-md", patch, NS)

    def rolling() -> dict[str, Any]:
        return conditions(read()).get("RollingOut") or {}

    wait_until(lambda: "waiting for Node" in rolling().get("message", ""), 90, interval=0.5,
               what="RollingOut to name the new machine waiting for its Node")  # fmt: skip
    assert rolling()["status"] == "True" and "on old MachineSets" in rolling()["message"]
    assert kstatus(read()) in ("InProgress", "Failed")
    wait_until(
        lambda: kstatus(read()) == "Failed", 60, interval=0.5, what="Stalled after the progress deadline"
    )
    assert conditions(read())["Stalled"]["reason"] == "ProgressDeadlineExceeded"
    about = why(sandbox, f"machinedeployment/{NS}/why-md")
    assert any(h["waits_for"] == "waiting for Node" for h in about["holders"]), about["holders"]
    assert any(line.startswith("RollingOut: RollingOut: Rolling out") for line in about["waits"]), about[
        "waits"
    ]
