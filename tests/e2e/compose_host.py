"""compose/compose.yaml run as plain host processes (no Docker here): each service's command with its
environment, its replicas, its config files, in the order of its depends_on.

What a container network gives for free is mapped onto the loopback: every ``service:port`` it
exposes becomes ``127.0.0.1:<free port>`` in every command, variable and config file, and the
service's own listening port in its command with it; config files are written to a folder and
their container paths replaced by the host paths; each replica gets its own metrics port.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mcm_sandbox.procs import ManagedProcess, free_port, redis_server_binary

COMPOSE_DIR = Path(__file__).resolve().parents[2] / "compose"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}``."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3) or ""
        value = env.get(name)
        if op in (":-", "-"):
            return value if value else arg
        if op in (":?", "?") and not value:
            raise KeyError(f"{name}: {arg}")
        return value or ""

    return _VAR.sub(one, text)


@dataclass
class HostCompose:
    """The compose project's services, rewritten for the host."""

    spec: dict[str, Any]
    workdir: Path
    addresses: dict[tuple[str, str], int] = field(default_factory=dict)
    config_paths: dict[str, Path] = field(default_factory=dict)
    processes: dict[str, ManagedProcess] = field(default_factory=dict)

    @classmethod
    def load(cls, env: Mapping[str, str], workdir: Path, profiles: set[str]) -> HostCompose:
        text = interpolate((COMPOSE_DIR / "compose.yaml").read_text(), env)
        spec = yaml.safe_load(text)
        spec["services"] = {
            name: svc
            for name, svc in spec["services"].items()
            if not svc.get("profiles") or set(svc["profiles"]) & profiles
        }
        self = cls(spec, workdir)
        for name, svc in spec["services"].items():
            for port in svc.get("expose", []):
                self.addresses[(name, str(port))] = free_port()
        for name, config in spec.get("configs", {}).items():
            source = (COMPOSE_DIR / config["file"]).resolve()
            target = workdir / "configs" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(self.rewrite(source.read_text()))
            self.config_paths[name] = target
        return self

    def rewrite(self, text: str, service: str = "") -> str:
        for (name, port), host_port in self.addresses.items():
            text = text.replace(f"{name}:{port}", f"127.0.0.1:{host_port}")
        text = text.replace("0.0.0.0", "127.0.0.1")
        if service:  # the container's tmpfs first: the host paths below may lie under /tmp too
            text = text.replace("/tmp/", f"{self.workdir / service}-")
            for target, path in self._mounts(service).items():
                text = text.replace(target, str(path))
        return text

    def _mounts(self, service: str) -> dict[str, Path]:
        mounts = {}
        for item in self.spec["services"][service].get("configs", []):
            mounts[item["target"]] = self.config_paths[item["source"]]
        return mounts

    def own_port(self, service: str, arg: str) -> str:
        """The service's own exposed port in its command becomes its host port."""
        for (name, port), host_port in self.addresses.items():
            if name == service and (arg == port or arg.endswith(f"={port}")):
                return arg[: -len(port)] + str(host_port)
        return arg

    def command(self, service: str) -> list[str]:
        args = [
            self.own_port(service, self.rewrite(str(a), service))
            for a in self.spec["services"][service]["command"]
        ]
        binary = {"redis-server": redis_server_binary()}.get(args[0])
        if binary is None:
            binary = shutil.which(args[0], path=str(Path(sys.executable).parent)) or args[0]
        return [binary, *args[1:]]

    def environment(self, service: str) -> dict[str, str]:
        env = {
            k: self.rewrite(str(v), service)
            for k, v in (self.spec["services"][service].get("environment") or {}).items()
        }
        return {**os.environ, **env}

    def replicas(self, service: str) -> int:
        return int(self.spec["services"][service].get("deploy", {}).get("replicas", 1))

    def order(self) -> list[str]:
        """Services in depends_on order (each after what it depends on)."""
        done: list[str] = []

        def visit(name: str) -> None:
            if name in done:
                return
            deps = self.spec["services"][name].get("depends_on") or []
            for dep in deps if isinstance(deps, list) else deps.keys():
                if dep in self.spec["services"]:
                    visit(dep)
            done.append(name)

        for name in self.spec["services"]:
            visit(name)
        return done

    def start(self, service: str, extra_env: Mapping[str, str] | None = None) -> list[ManagedProcess]:
        started = []
        for i in range(self.replicas(service)):
            env = {**self.environment(service), "MCM_PORT": str(free_port()), **(extra_env or {})}
            proc = ManagedProcess(
                self.command(service), self.workdir / "logs" / f"{service}-{i}.log", env=env
            )
            proc.start()
            self.processes[f"{service}-{i}"] = proc
            started.append(proc)
        return started

    def host_port(self, service: str, port: str) -> int:
        return self.addresses[(service, port)]

    def stop(self) -> None:
        for proc in reversed(list(self.processes.values())):
            proc.stop(timeout=5.0)

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{proc.log_tail(15)}" for name, proc in self.processes.items())
