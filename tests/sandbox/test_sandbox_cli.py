"""``mcm-tasks sandbox up|down`` and settings validation, run as an operator runs them: the console
script in a subprocess. ``up`` must leave a working sandbox behind (kubeconfigs and an ``env`` file
whose settings reach the servers) and ``down`` must leave nothing running."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis
from kubernetes import client, config

from informers import SYNCED_KEY_PARTS
from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import ENV_FILE, STATE_FILE, down
from mcm_tasks.api import GROUP, VERSION
from mcm_tasks.settings import Settings

pytestmark = pytest.mark.integration

#: the console script of the environment running the tests (.venv/bin/mcm-tasks)
MCM_TASKS = str(Path(sys.executable).with_name("mcm-tasks"))
#: what `sandbox up` may take to report ready (about 10 s on an idle 2-core machine)
UP_READY_TIMEOUT = 120
STARTED = {"redis", "apiserver-control", "apiserver-target", "kubelet", "informer", "worker-0", "beat"}
#: the env file also points kubectl at the control cluster
SETTINGS = {"MCM_REDIS_URL", "MCM_CONTROL_KUBECONFIG", "MCM_TARGET_KUBECONFIG", "KUBECONFIG"}
#: the sandbox processes run without MCM_KEY_PREFIX, so with the default prefix
SYNCED_KEY = ":".join((Settings.model_fields["key_prefix"].default, *SYNCED_KEY_PARTS))


def _clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without MCM_* settings (every sandbox process inherits it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCM_")}
    return {**env, "COLUMNS": "200", **extra}


def _run(
    args: list[str], env: dict[str, str], timeout: float
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run a command in its own session; on timeout interrupt it (``up`` then tears down what it
    started), kill its group if that does not end it, and fail. Returns the result and its duration."""
    started = time.monotonic()
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(f"{shlex.join(args)} did not finish within {timeout}s:\n{out}\n{err}")
    return subprocess.CompletedProcess(args, proc.returncode, out, err), time.monotonic() - started


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (None: no such live process); with the pid it
    identifies one process, so a pid reused later is not mistaken for it. Zombies count as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    state, start = fields[0], fields[19]
    return None if state in ("Z", "X") else start


def _group_members(groups: set[int]) -> dict[int, str]:
    """Every live process whose process group is one of ``groups`` (each sandbox process leads its
    own group, so this also finds the Celery pool processes a worker forked): pid -> start time."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) in groups and fields[0] not in ("Z", "X"):
            found[int(entry.name)] = fields[19]
    return found


def _read_env_file(path: Path) -> dict[str, str]:
    """``export KEY=value`` lines as a shell would read them."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        words = shlex.split(line)
        if not words:
            continue
        assert words[0] == "export" and len(words) == 2, line
        key, _, value = words[1].partition("=")
        out[key] = value
    return out


def _refuses(url: str) -> bool:
    parsed = urlparse(url)
    assert parsed.hostname and parsed.port
    try:
        with socket.create_connection((parsed.hostname, parsed.port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def _namespaces(kubeconfig: str) -> tuple[str, set[str]]:
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        names = {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace(_request_timeout=10).items}
        return api.configuration.host, names
    finally:
        api.close()


@pytest.mark.e2e
@pytest.mark.timeout(UP_READY_TIMEOUT + 240)
def test_sandbox_up_then_down_leaves_nothing_running(tmp_path: Path) -> None:
    directory = tmp_path / "sandbox"
    # prefork, not the default threads pool: the worker forks pool processes, which down must end too
    env = {**_clean_env(), "MCM_WORKER_POOL": "prefork"}
    try:
        up, up_seconds = _run(
            [
                MCM_TASKS,
                "sandbox",
                "up",
                "--dir",
                str(directory),
                "--workers",
                "1",
                "--timeout",
                str(UP_READY_TIMEOUT),
            ],
            env,
            UP_READY_TIMEOUT + 30,
        )
        logs = "\n".join(
            f"== {p.name}\n{p.read_text(errors='replace')[-2000:]}"
            for p in (directory / "logs").glob("*.log")
        )
        assert up.returncode == 0, f"up failed after {up_seconds:.1f}s:\n{up.stdout}\n{up.stderr}\n{logs}"
        assert f"source {directory / ENV_FILE}" in up.stdout
        print(f"sandbox up took {up_seconds:.1f}s")

        # everything it started outlives the command
        state = json.loads((directory / STATE_FILE).read_text())
        pids: dict[str, int] = state["pids"]
        assert set(pids) == STARTED
        started = _group_members(set(pids.values()))
        assert set(pids.values()) <= set(started), f"not running after up: {pids} vs {sorted(started)}"
        assert len(started) > len(pids)  # the worker's pool processes, at least

        # the files it promises, and settings in DIR/env that reach the servers
        for name in ("kubeconfig", "target-kubeconfig", ENV_FILE):
            assert (directory / name).is_file(), name
        settings = _read_env_file(directory / ENV_FILE)
        assert set(settings) == SETTINGS
        assert settings["MCM_CONTROL_KUBECONFIG"] == str(directory / "kubeconfig") == settings["KUBECONFIG"]
        assert settings["MCM_TARGET_KUBECONFIG"] == str(directory / "target-kubeconfig")
        control_host, control_namespaces = _namespaces(settings["MCM_CONTROL_KUBECONFIG"])
        target_host, target_namespaces = _namespaces(settings["MCM_TARGET_KUBECONFIG"])
        assert control_host == state["control_url"] and target_host == state["target_url"]
        assert control_host != target_host  # two clusters, not one
        assert {"default", "kube-system"} <= control_namespaces and {
            "default",
            "kube-system",
        } <= target_namespaces
        api = config.new_client_from_config(config_file=settings["MCM_CONTROL_KUBECONFIG"])
        try:  # up registered MCM's CRDs in the control cluster
            listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
                GROUP, VERSION, "default", "machinedeployments", _request_timeout=10
            )
            assert listed["items"] == []
        finally:
            api.close()
        assert settings["MCM_REDIS_URL"] == state["redis_url"]
        r = redis.Redis.from_url(settings["MCM_REDIS_URL"], socket_timeout=5)
        try:
            assert r.ping()
            # the informer reports its sync in this Redis: the env's Redis is the one the sandbox uses
            assert r.exists(SYNCED_KEY)
        finally:
            r.close()

        down_run, down_seconds = _run([MCM_TASKS, "sandbox", "down", "--dir", str(directory)], env, 90)
        assert down_run.returncode == 0, f"{down_run.stdout}\n{down_run.stderr}"
        assert "stopped" in down_run.stdout
        print(f"sandbox down took {down_seconds:.1f}s")

        def all_gone() -> bool:
            return not any(_start_time(pid) == start for pid, start in started.items())

        with contextlib.suppress(TimeoutError):
            wait_until(all_gone, 15, what="every sandbox process to exit")
        left = {pid: start for pid, start in started.items() if _start_time(pid) == start}
        assert not left, f"still running after down: {left} of {pids}"
        for url in (
            state["control_url"],
            state["target_url"],
            state["redis_url"],
            *state["endpoints"].values(),
        ):
            assert _refuses(url), f"{url} still accepts connections"
        assert not (directory / STATE_FILE).exists()
    finally:
        if (directory / STATE_FILE).exists():
            down(directory, echo=lambda _: None)


@pytest.mark.parametrize(
    ("args", "extra_env", "names"),
    [
        (["worker"], {"MCM_SAFETY_UP": "abc"}, ("--safety-up", "MCM_SAFETY_UP")),
        (["informer"], {"MCM_WATCH_TIMEOUT": "soon"}, ("--watch-timeout", "MCM_WATCH_TIMEOUT")),
        (
            ["beat", "--machine-health-timeout=banana"],
            {},
            ("--machine-health-timeout", "MCM_MACHINE_HEALTH_TIMEOUT"),
        ),
    ],
    ids=["worker-env", "informer-env", "beat-flag"],
)
def test_invalid_setting_stops_start_up_naming_it(
    args: list[str], extra_env: dict[str, str], names: tuple[str, ...]
) -> None:
    """Without servers to reach: a command that did not validate first would keep trying to connect
    (the bounded run then fails the test) instead of exiting with a usage error."""
    result, seconds = _run([MCM_TASKS, *args], _clean_env(**extra_env), timeout=45)
    message = " ".join(result.stderr.replace("│", " ").split())
    assert result.returncode == 2, (
        f"rc={result.returncode} after {seconds:.1f}s:\n{result.stdout}\n{result.stderr}"
    )
    assert "invalid settings" in message and all(name in message for name in names), message
    assert seconds < 30
