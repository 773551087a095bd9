"""``mcm-tasks sandbox up|down``: the whole system on one machine, in the background.

``up`` starts Redis, two sandbox API servers (control and target cluster), the kubelet
simulator, the informer, N worker processes and beat; writes ``DIR/kubeconfig``,
``DIR/target-kubeconfig`` and ``DIR/env``; registers the CRDs; and returns once everything
answers. ``down`` stops whatever ``up`` started, found through ``DIR/state.json``. Every process
inherits the caller's ``MCM_*`` environment, so timeouts can be compressed from outside.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mcm_sandbox.procs import ApiServer, ManagedProcess, RedisServer, free_port, http_ok, wait_until

if TYPE_CHECKING:
    from mcm_tasks.settings import Settings

STATE_FILE = "state.json"
ENV_FILE = "env"


@dataclass
class Sandbox:
    """What ``up`` started; serialised to ``DIR/state.json`` for ``down`` and for tests."""

    dir: Path
    redis_url: str = ""
    control_url: str = ""
    target_url: str = ""
    pids: dict[str, int] = field(default_factory=dict)
    #: process name -> its /metrics, /healthz, /configz endpoint
    endpoints: dict[str, str] = field(default_factory=dict)
    #: the ``MCM_REDIS_*`` settings of an external Redis (a Sentinel group, TLS and an ACL user)
    redis_env: dict[str, str] = field(default_factory=dict)
    #: the local cloud's own Redis (``up(cloud_redis=True)``); empty: its VMs live in ``redis_url``
    cloud_redis_url: str = ""

    @property
    def cloud_url(self) -> str:
        """The Redis holding the local cloud's VMs."""
        return self.cloud_redis_url or self.redis_url

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def target_kubeconfig(self) -> Path:
        return self.dir / "target-kubeconfig"

    def env(self) -> dict[str, str]:
        """The settings a process needs to reach this sandbox."""
        env = {
            **self.redis_env,
            "MCM_REDIS_URL": self.redis_url,
            "MCM_CONTROL_KUBECONFIG": str(self.kubeconfig),
            "MCM_TARGET_KUBECONFIG": str(self.target_kubeconfig),
        }
        if self.cloud_redis_url:
            env["MCM_LOCAL_CLOUD_REDIS_URL"] = self.cloud_redis_url
        return env

    def redis_settings(self) -> Settings:
        """This process's settings pointed at the sandbox's Redis (URL, Sentinel, TLS, ACL user)."""
        from mcm_tasks.settings import load_settings

        fields = {k.removeprefix("MCM_").lower(): v for k, v in self.env().items() if "REDIS" in k}
        return load_settings(fields)

    def save(self) -> None:
        state = {
            "redis_url": self.redis_url,
            "control_url": self.control_url,
            "target_url": self.target_url,
            "pids": self.pids,
            "endpoints": self.endpoints,
            "redis_env": self.redis_env,
            "cloud_redis_url": self.cloud_redis_url,
        }
        (self.dir / STATE_FILE).write_text(json.dumps(state, indent=2))
        # kubectl finds the control cluster (machine objects); nodes are in the target kubeconfig
        shell = {**self.env(), "KUBECONFIG": str(self.kubeconfig)}
        lines = [f"export {k}={shlex.quote(v)}" for k, v in sorted(shell.items())]
        (self.dir / ENV_FILE).write_text("\n".join(lines) + "\n")

    @classmethod
    def load(cls, directory: Path) -> Sandbox:
        state = json.loads((directory / STATE_FILE).read_text())
        return cls(dir=directory, **state)


class SandboxRunning(RuntimeError):
    """``up`` on a folder whose sandbox still runs (``force`` replaces it)."""


def running_pids(directory: Path) -> dict[str, int]:
    """The processes of the sandbox recorded in ``directory`` that are still alive."""
    if not (directory / STATE_FILE).exists():
        return {}
    try:
        sandbox = Sandbox.load(directory)
    except (ValueError, TypeError, OSError):
        return {}
    return {name: pid for name, pid in sandbox.pids.items() if _alive(pid)}


def _python_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "mcm_tasks.cli", *args]


def up(
    directory: Path,
    workers: int = 2,
    aws_endpoint: str | None = None,
    with_beat: bool = True,
    timeout: float = 90.0,
    echo: Callable[[str], None] = print,
    controller_args: Sequence[str] = (),
    force: bool = False,
    redis_env: Mapping[str, str] | None = None,
    cloud_redis: bool = False,
    informer_watch_delay: float = 0.0,
    beat_in_informer: bool = False,
    informer_watch_delay_for: Mapping[str, float] | None = None,
) -> Sandbox:
    """Start everything, telling ``echo`` what starts and how long it took; on any failure stop
    what was started and re-raise. ``controller_args`` (flags, e.g. an upstream MCM command line)
    go to the informer, workers and beat; each still gets its own ``--port``. A sandbox still
    running in ``directory`` is an error (:class:`SandboxRunning`) unless ``force``, which stops
    it first. ``redis_env`` (``MCM_REDIS_URL`` and the other ``MCM_REDIS_*`` settings) points the
    sandbox at a Redis started elsewhere (``mcm_sandbox.redis_ha``) instead of its own. ``cloud_redis``
    gives the local cloud (its VMs, read by the workers' driver and the kubelet simulator) a Redis of
    its own (``cloud-redis``), so that the controller's Redis carries only the controller's load, as
    with a real cloud (the benchmarks' accounting). ``informer_watch_delay`` puts a proxy
    (``mcm_sandbox.watchdelay``) between the informer and each API server that delays every watch
    event by that many seconds, as a loaded API server's watches arrive late; the workers still
    talk to the API servers directly; ``informer_watch_delay_for`` (resource plural → seconds) holds
    some resources' watches for another time (``watchdelay --delay-for``), so that two kinds' changes
    reach the mirror out of the order they were written in. ``beat_in_informer`` (with
    ``with_beat``) runs beat as a thread of the informer (``mcm-tasks informer --beat``) instead of a
    process of its own: the smallest installation."""
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    alive = running_pids(directory)
    if alive and not force:
        raise SandboxRunning(
            f"a sandbox is already running in {directory} ({len(alive)} processes: "
            f"{', '.join(sorted(alive))}); use it (source {directory / ENV_FILE}), stop it with "
            f"`mcm-tasks sandbox down --dir {directory}`, or replace it with --force"
        )
    if (directory / STATE_FILE).exists():
        down(directory, echo=lambda _: None)
    sandbox = Sandbox(dir=directory)
    logs = directory / "logs"
    clock = time.monotonic()

    def done(what: str) -> None:
        nonlocal clock
        echo(f"  {what:<44} {time.monotonic() - clock:5.1f}s")
        clock = time.monotonic()

    try:
        if redis_env:
            sandbox.redis_env = dict(redis_env)
            sandbox.redis_url = redis_env["MCM_REDIS_URL"]
        else:
            redis = RedisServer(directory / "redis").start(timeout)
            sandbox.redis_url = redis.url
            sandbox.pids["redis"] = redis.process.pid if redis.process else 0
            done(f"redis-server on {redis.url}")
        if cloud_redis:
            cloud = RedisServer(directory / "cloud-redis").start(timeout)
            sandbox.cloud_redis_url = cloud.url
            sandbox.pids["cloud-redis"] = cloud.process.pid if cloud.process else 0
            done(f"the local cloud's redis-server on {cloud.url}")
        for role, kubeconfig in (("control", sandbox.kubeconfig), ("target", sandbox.target_kubeconfig)):
            api = ApiServer(logs, name=f"apiserver-{role}", kubeconfig_path=kubeconfig)
            api.start(timeout)
            setattr(sandbox, f"{role}_url", api.url)
            sandbox.pids[f"apiserver-{role}"] = api.process.pid if api.process else 0
            done(f"{role} API server on {api.url}")
        informer_env: dict[str, str] = {}
        if informer_watch_delay > 0 or informer_watch_delay_for:
            informer_env = _watch_delay_proxies(
                sandbox, logs, informer_watch_delay, timeout, informer_watch_delay_for or {}
            )
            done(f"watch-delay proxies ({informer_watch_delay:g}s) for the informer")
        sandbox.save()
        register_crds(sandbox.kubeconfig, timeout)
        done("machine.sapcloud.io CRDs registered")

        env = {**os.environ, **sandbox.env()}
        if aws_endpoint:
            env["MCM_AWS_ENDPOINT_URL"] = aws_endpoint
        kubelet_args = ["sandbox", "kubelet", "--target-kubeconfig", str(sandbox.target_kubeconfig)]
        if aws_endpoint:  # the kubelet also plays the EC2 instances it finds there
            kubelet_args += ["--aws-endpoint", aws_endpoint]
        commands: dict[str, list[str]] = {
            "kubelet": _python_cli(*kubelet_args, "--redis-url", sandbox.cloud_url),
            "informer": _python_cli("informer", *(["--beat"] if with_beat and beat_in_informer else [])),
        }
        for i in range(workers):
            commands[f"worker-{i}"] = _python_cli("worker", "--hostname", f"worker-{i}@%h")
        if with_beat and not beat_in_informer:
            commands["beat"] = _python_cli("beat")
        for name, args in commands.items():
            port = free_port()
            if name != "kubelet" and controller_args:
                args = [*args, *controller_args, f"--port={port}", "--address=127.0.0.1"]
            sandbox.endpoints[name] = f"http://127.0.0.1:{port}"
            proc_env = {**env, "MCM_PORT": str(port), "MCM_ADDRESS": "127.0.0.1"}
            if name == "informer":
                proc_env.update(informer_env)
            proc = ManagedProcess(args, logs / f"{name}.log", env=proc_env)
            proc.start()
            sandbox.pids[name] = proc.pid
            sandbox.save()
        done(f"started {', '.join(commands)}")
        wait_ready(sandbox, workers, timeout, done)
    except BaseException:
        down(directory, echo=lambda _: None)
        raise
    echo(f"sandbox up in {directory}: source {directory / ENV_FILE}")
    return sandbox


def _watch_delay_proxies(
    sandbox: Sandbox, logs: Path, delay: float, timeout: float, delay_for: Mapping[str, float]
) -> dict[str, str]:
    """Start a watch-delaying proxy per API server; the informer's kubeconfig settings pointing at
    them (copies of the sandbox's kubeconfigs with the proxy as server)."""
    import yaml

    env: dict[str, str] = {}
    for role, kubeconfig, setting in (
        ("control", sandbox.kubeconfig, "MCM_CONTROL_KUBECONFIG"),
        ("target", sandbox.target_kubeconfig, "MCM_TARGET_KUBECONFIG"),
    ):
        port = free_port()
        upstream = getattr(sandbox, f"{role}_url")
        args = [sys.executable, "-m", "mcm_sandbox.watchdelay", "--upstream", upstream, "--port", str(port),
                "--delay", str(delay)]  # fmt: skip
        for resource, seconds in sorted(delay_for.items()):
            args += ["--delay-for", f"{resource}={seconds}"]
        proc = ManagedProcess(args, logs / f"watchdelay-{role}.log", env=dict(os.environ))
        proc.start()
        sandbox.pids[f"watchdelay-{role}"] = proc.pid
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda u=url: http_ok(f"{u}/readyz"), timeout, what=f"watch-delay proxy {role}")  # type: ignore[misc]
        config = yaml.safe_load(kubeconfig.read_text())
        for cluster in config.get("clusters") or []:
            cluster["cluster"]["server"] = url
        delayed = sandbox.dir / f"informer-{kubeconfig.name}"
        delayed.write_text(yaml.safe_dump(config))
        env[setting] = str(delayed)
    return env


def register_crds(kubeconfig: Path, timeout: float) -> None:
    from kubernetes import config

    from mcm_sandbox.crds import install_crds

    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        install_crds(api_client, timeout)
    finally:
        api_client.close()


def wait_ready(
    sandbox: Sandbox, workers: int, timeout: float, done: Callable[[str], None] = lambda _: None
) -> None:
    """Every started process alive, the informer synced, the workers answering a ping."""
    from mcm_tasks.redisdb import connect, redis_target

    deadline = time.monotonic() + timeout
    settings = sandbox.redis_settings()
    client = connect(redis_target(settings))

    def alive_or_raise() -> None:
        for name, pid in sandbox.pids.items():
            if not _alive(pid):
                log = sandbox.dir / "logs" / f"{name}.log"
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                raise RuntimeError(f"sandbox process {name} exited during start-up:\n{tail}")

    def informer_synced() -> bool:
        alive_or_raise()
        return bool(client.exists(_informer_synced_key()))

    wait_until(informer_synced, max(deadline - time.monotonic(), 1), what="informer synced")
    done("informer synced both clusters into Redis")

    from celery import Celery

    from mcm_tasks.celery_app import celery_config

    # an app of our own for the ping: the process-wide one may be bound to another broker (tests)
    pinger = Celery("mcm-sandbox-ping", set_as_current=False)
    pinger.conf.update(celery_config(settings))

    def workers_answer() -> bool:
        alive_or_raise()
        return len(pinger.control.ping(timeout=0.5) or []) >= workers

    try:
        wait_until(workers_answer, max(deadline - time.monotonic(), 1), what=f"{workers} workers")
        done(f"{workers} workers answer")
    finally:
        pinger.close()
        client.close()


def _informer_synced_key() -> str:
    from informers import SYNCED_KEY_PARTS
    from mcm_tasks.redisdb import rkey

    return rkey(*SYNCED_KEY_PARTS)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def down(directory: Path, echo: Callable[[str], None] = print, timeout: float = 10.0) -> None:
    """Stop every process ``up`` started (TERM to its process group, KILL after the timeout)."""
    directory = directory.resolve()
    if not (directory / STATE_FILE).exists():
        echo(f"no sandbox in {directory}")
        return
    sandbox = Sandbox.load(directory)
    # workers and informer first, so they don't log a storm of connection errors
    order = sorted(
        sandbox.pids.items(), key=lambda kv: kv[0].startswith(("redis", "cloud-redis", "apiserver"))
    )
    for _, pid in order:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for _, pid in order:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    (directory / STATE_FILE).unlink(missing_ok=True)
    echo(f"sandbox in {directory} stopped")
