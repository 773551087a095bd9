"""``mcm-tasks admin``, run as an operator runs it (the console script in a subprocess) against a live
sandbox: every verb in table and JSON form, a failing key made by real API-server faults, freeze and
unfreeze through the safety controller, and bad input answered with one line and exit 2, never a
traceback."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes.client import ApiClient

from mcm_sandbox.procs import free_port, wait_until
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.api.constants import FREEZE_LABEL_KEY, UNFREEZE_ANNOTATION
from mcm_tasks.kube import ops
from tests.e2e.support import connected, running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

MCM_TASKS = str(Path(sys.executable).with_name("mcm-tasks"))
NS = "default"
SET = f"{NS}/adm"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    env = {"MCM_ERROR_BACKOFF_BASE": "0.5", "MCM_ERROR_BACKOFF_MAX": "2s"}
    with running_sandbox(Path(tmp_path_factory.mktemp("admin")), env, workers=1, with_beat=False) as started:
        yield started


@pytest.fixture(scope="module")
def clients(sandbox: Sandbox) -> Iterator[tuple[ApiClient, ApiClient, redis.Redis]]:
    with connected(sandbox) as made:
        yield made


def admin(sandbox: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MCM_")}, **sandbox.env()}
    done = subprocess.run([MCM_TASKS, "admin", *args], env=env, capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


def ok_json(sandbox: Sandbox, *args: str) -> Any:
    done = admin(sandbox, *args, "--output", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def refused(sandbox: Sandbox, *args: str, code: int = 2) -> str:
    done = admin(sandbox, *args)
    assert done.returncode == code, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: "), done.stderr
    return done.stderr


def faults(sandbox: Sandbox, rule: dict[str, Any] | None) -> None:
    """Add an API-server fault rule on the control cluster, or clear them all."""
    url = sandbox.control_url + "/sandbox/faults"
    if rule is None:
        request = urllib.request.Request(url, method="DELETE")
    else:
        body = json.dumps(rule).encode()
        request = urllib.request.Request(
            url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
    urllib.request.urlopen(request, timeout=5).close()


@pytest.fixture(scope="module")
def machine_set(sandbox: Sandbox, clients: tuple[ApiClient, ApiClient, redis.Redis]) -> str:
    control = clients[0]
    user_data = base64.b64encode(b"#!/bin/sh\n").decode()
    ops.create(
        control,
        kinds.SECRET.resource,
        {"metadata": {"name": "adm-secret", "namespace": NS}, "data": {"userData": user_data}},
    )
    ops.create(control, kinds.MACHINE_CLASS.resource, {
        "apiVersion": API_VERSION, "kind": "MachineClass", "metadata": {"name": "adm-class", "namespace": NS},
        "provider": "local", "providerSpec": {}, "secretRef": {"name": "adm-secret", "namespace": NS},
    })  # fmt: skip
    ops.create(control, kinds.MACHINE_SET.resource, {
        "apiVersion": API_VERSION, "kind": "MachineSet", "metadata": {"name": "adm", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "adm"}},
                 "template": {"metadata": {"labels": {"app": "adm"}},
                              "spec": {"class": {"kind": "MachineClass", "name": "adm-class"}}}},
    })  # fmt: skip

    def ran() -> bool:
        done = admin(sandbox, "inspect", "machineset", SET, "--output", "json")
        return done.returncode == 0 and any(r["end"] for r in json.loads(done.stdout)["history"])

    wait_until(ran, 90, interval=0.5, what="a finished reconcile of the MachineSet")
    return SET


def test_inspect_shows_state_and_history(sandbox: Sandbox, machine_set: str) -> None:
    found = ok_json(sandbox, "inspect", "machineset", machine_set)
    assert found["kind"] == "machineset" and found["in_mirror"] is True
    assert found["state"] in ("idle", "waiting", "delayed", "running")
    finished = [r for r in found["history"] if r["end"]]
    assert finished and finished[0]["worker"] and finished[0]["outcome"]
    table = admin(sandbox, "inspect", "machineset", machine_set)
    assert table.returncode == 0 and f"machineset {machine_set}:" in table.stdout and "worker" in table.stdout


def test_lists_and_queues_with_a_legend(sandbox: Sandbox, machine_set: str) -> None:
    assert isinstance(ok_json(sandbox, "running"), list)
    assert isinstance(ok_json(sandbox, "delayed", "--kind", "machine"), list)
    assert isinstance(ok_json(sandbox, "failing"), list)
    queues = {q["queue"]: q for q in ok_json(sandbox, "queues")}
    assert queues["machineset"]["adds"] >= 1 and "recovered" in queues["safety"]
    table = admin(sandbox, "queues")
    assert table.returncode == 0 and "dirty      running keys that got an event" in table.stdout
    for verb in ("running", "delayed", "failing"):
        assert admin(sandbox, verb).returncode == 0


def test_a_failing_key_is_listed_inspected_and_replayed(
    sandbox: Sandbox, clients: tuple[ApiClient, ApiClient, redis.Redis], machine_set: str
) -> None:
    control = clients[0]
    faults(sandbox, {"action": "error", "status_code": 500, "verbs": ["create"], "resources": ["machines"]})
    try:
        ops.patch(control, kinds.MACHINE_SET.resource, "adm", {"spec": {"replicas": 3}}, NS)

        def failing() -> list[dict[str, Any]]:
            return [f for f in ok_json(sandbox, "failing") if f["key"] == machine_set]

        wait_until(lambda: bool(failing()), 60, interval=0.5, what="the set to be listed as failing")
        (entry,) = failing()
        assert entry["kind"] == "machineset" and entry["count"] >= 1 and entry["error"]
        found = ok_json(sandbox, "inspect", "machineset", machine_set)
        assert found["failing"]["count"] >= 1
        assert any("failing" in line for line in found["summary"])
        assert any(r["error"] for r in found["history"])
        replayed = ok_json(sandbox, "replay", "machineset", machine_set)
        assert replayed == {"kind": "machineset", "key": machine_set, "was_failing": True}
        wait_until(lambda: bool(failing()), 60, interval=0.5, what="the set to fail again")
        assert ok_json(sandbox, "replay", "--failing")["replayed"] >= 1
    finally:
        faults(sandbox, None)
    wait_until(lambda: not [f for f in ok_json(sandbox, "failing") if f["key"] == machine_set], 60,
               interval=0.5, what="the set to recover once the faults are gone")  # fmt: skip


def test_freeze_and_unfreeze_through_the_safety_controller(
    sandbox: Sandbox, clients: tuple[ApiClient, ApiClient, redis.Redis], machine_set: str
) -> None:
    control = clients[0]
    frozen = ok_json(sandbox, "freeze", "machineset", machine_set)
    assert frozen["labels"][FREEZE_LABEL_KEY] == "True"

    def metadata() -> dict[str, Any]:
        return dict(ops.get(control, kinds.MACHINE_SET.resource, "adm", NS)["metadata"])

    assert metadata()["labels"][FREEZE_LABEL_KEY] == "True"
    unfrozen = ok_json(sandbox, "unfreeze", "machineset", machine_set)
    assert UNFREEZE_ANNOTATION in unfrozen["annotations"]
    wait_until(
        lambda: (
            FREEZE_LABEL_KEY not in (metadata().get("labels") or {})
            and UNFREEZE_ANNOTATION not in (metadata().get("annotations") or {})
        ),
        60,
        interval=0.5,
        what="the safety controller to lift the freeze",
    )


def test_bad_input_is_one_line_and_exit_2(sandbox: Sandbox, machine_set: str) -> None:
    assert "unknown kind 'pods'" in refused(sandbox, "inspect", "pods", machine_set)
    assert "no machineset 'default/nothing'" in refused(sandbox, "inspect", "machineset", "default/nothing")
    assert "no machineset" in refused(sandbox, "replay", "machineset", "default/nothing")
    assert "unknown kind" in refused(sandbox, "running", "--kind", "pods")
    assert "unknown kind" in refused(sandbox, "enqueue", "pods", "x")
    assert "only machineset and machinedeployment" in refused(sandbox, "freeze", "machine", "default/m")
    assert "no machinedeployment default/nothing" in refused(
        sandbox, "unfreeze", "machinedeployment", "nothing"
    )
    usage = admin(sandbox, "replay")
    assert usage.returncode == 2 and "KIND KEY" in usage.stderr
    bad_output = admin(sandbox, "queues", "--output", "yaml")
    assert bad_output.returncode == 2
    gone = f"redis://127.0.0.1:{free_port()}/0"
    assert "cannot reach Redis" in refused(sandbox, "--redis-url", gone, "queues", code=1)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_probes_and_metrics_that_add_up_across_processes(sandbox: Sandbox, machine_set: str) -> None:
    """In the same live sandbox: the informer leads and says so, every process is ready, and the
    fleet series come from the leading informer alone, so a sum over all pods counts them once."""
    informer, worker = sandbox.endpoints["informer"], sandbox.endpoints["worker-0"]
    status, body = _get(informer + "/readyz")
    ready = json.loads(body)
    assert status == 200 and ready["leading"] == {"informer": True}
    assert ready["checks"]["redis"]["ok"] and ready["checks"]["apiserver"]["ok"]
    status, body = _get(worker + "/readyz")
    assert status == 200 and json.loads(body)["checks"]["apiserver"]["ok"]
    for endpoint in (informer, worker):
        assert _get(endpoint + "/healthz")[0] == 200
    scrapes = {
        name: _get(url + "/metrics")[1] for name, url in sandbox.endpoints.items() if name != "kubelet"
    }
    assert 'mcm_leader{component="informer"} 1.0' in scrapes["informer"]
    for series in ("mcm_machine_set_items_total ", 'mcm_workqueue_depth{name="machineset"}'):
        exporting = [name for name, text in scrapes.items() if series in text]
        assert exporting == ["informer"], (series, exporting)
    assert "pid=" not in scrapes["worker-0"]
