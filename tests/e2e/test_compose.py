"""compose/compose.yaml with its sandbox profile, every service started as plain host processes with
the command, environment, replicas and config files the file gives it: a MachineDeployment rolls,
and Flower answers only with its password. Proves the commands, flags and settings written there."""

from __future__ import annotations

import base64
import secrets
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mcm_sandbox.fleet import Fleet, machine_class, machine_deployment
from mcm_sandbox.procs import wait_until
from tests.e2e.compose_host import HostCompose
from tests.e2e.support import COMPRESSED

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.fixture()
def project(tmp_path: Path) -> Iterator[HostCompose]:
    env = {"REDIS_PASSWORD": secrets.token_hex(8), "FLOWER_PASSWORD": "s3cret"}
    compose = HostCompose.load(env, tmp_path, profiles={"sandbox"})
    try:
        yield compose
    finally:
        compose.stop()


def _started(compose: HostCompose, service: str) -> None:
    """Wait for what the dependants' depends_on asks of this service."""
    procs = [p for name, p in compose.processes.items() if name.rsplit("-", 1)[0] == service]
    if service == "redis":
        env = compose.environment("worker")
        client = redis.Redis.from_url(env["MCM_REDIS_URL"], password=env["MCM_REDIS_PASSWORD"])

        def pong() -> bool:
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        wait_until(pong, 30, what="redis")
        client.close()
    elif service.startswith("apiserver-"):
        port = compose.host_port(service, "6443")
        wait_until(lambda: _get(f"http://127.0.0.1:{port}/readyz") == 200, 60, what=service)
    elif service == "sandbox-crds":
        for proc in procs:
            assert proc.proc is not None
            try:
                assert proc.proc.wait(120) == 0, proc.log_tail()
            except subprocess.TimeoutExpired:
                pytest.fail(f"sandbox-crds did not finish:\n{proc.log_tail()}")


def _get(url: str, auth: str = "") -> int:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def test_compose_services_roll_a_machine_deployment(project: HostCompose) -> None:
    services = project.order()
    assert {"redis", "informer", "worker", "beat", "flower", "apiserver-control", "kubelet"} <= set(services)
    assert project.replicas("informer") == 2 and project.replicas("beat") == 2
    for service in services:
        project.start(service, extra_env=COMPRESSED)
        _started(project, service)

    fleet = Fleet(project.config_paths["control-kubeconfig"], project.config_paths["target-kubeconfig"])
    try:
        fleet.create_secret("compose-secret")
        for name, itype in (("compose-a", "local.small"), ("compose-b", "local.large")):
            fleet.create("machineclasses", machine_class(name, itype, "default", "compose-secret"))
        fleet.create("machinedeployments", machine_deployment("compose", "default", 2, "compose-a"))
        try:
            wait_until(fleet.running(2, "compose-a"), 180, interval=0.5, what="2 machines Running")
            fleet.set_class("compose", "compose-b")
            wait_until(fleet.running(2, "compose-b"), 240, interval=0.5, what="rolled to compose-b")
        except TimeoutError:
            pytest.fail(f"{fleet.view('rollout stuck')}\n{project.logs()}")
    finally:
        fleet.close()

    flower = f"http://127.0.0.1:{project.host_port('flower', '5555')}"
    wait_until(lambda: _get(flower + "/healthcheck") == 200, 60, what="flower")
    assert _get(flower + "/workers") == 401
    assert _get(flower + "/workers", auth="admin:s3cret") == 200
    for name, proc in project.processes.items():
        if not name.startswith("sandbox-crds"):
            assert proc.alive(), f"{name} exited:\n{proc.log_tail()}"
