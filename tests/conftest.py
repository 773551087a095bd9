"""Shared fixtures: a real redis-server and the sandbox API server, each on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mcm_sandbox.procs import ApiServer, RedisServer


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcm")


@pytest.fixture(scope="session")
def redis_server(workdir: Path) -> Iterator[RedisServer]:
    server = RedisServer(workdir / "redis").start()
    yield server
    server.stop()


@pytest.fixture()
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """A clean database per test on the shared server."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield redis_server.url
    client.close()


@pytest.fixture()
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture(scope="session")
def apiserver(workdir: Path) -> Iterator[ApiServer]:
    """One sandbox API server for the session; tests use their own namespaces or names."""
    server = ApiServer(workdir / "apiserver").start()
    yield server
    server.stop()


@pytest.fixture()
def kube_api(apiserver: ApiServer):  # type: ignore[no-untyped-def]
    """An official-client ApiClient built from the kubeconfig the sandbox wrote."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(apiserver.kubeconfig))
    yield client
    client.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """When the chart's tests were skipped for want of a renderer, say why once, in one line, at
    the end of the run (tests/chart_support.py decides; under CI=true they fail instead)."""
    from tests import chart_support

    if chart_support.engine.cache_info().currsize and chart_support.engine().name == "none":
        terminalreporter.write_line(
            f"chart tests skipped: no helm on PATH, no chart renderer ({chart_support.engine().why})"
        )
