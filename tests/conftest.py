"""Shared fixtures: a real redis-server and the sandbox API server, each on a free port; and the
``fast`` marker, given by folder, that ``make test-fast`` selects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mcm_sandbox.procs import ApiServer, RedisServer

TESTS = Path(__file__).resolve().parent

#: The folders ``make test-fast`` runs (``pytest -m fast``): decisions and whole passes, in-process.
#: A real Redis is allowed there; the sandbox API server and worker processes are not.
FAST_FOLDERS = frozenset({"unit"})
#: Fixtures that start (or need) the sandbox API server: a fast test asking for one is an error.
SLOW_FIXTURES = frozenset({"apiserver", "kube_api"})
#: Markers of the slow folders: a fast test carrying one is an error.
SLOW_MARKERS = frozenset({"integration", "e2e"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of a fast folder ``fast``, so that ``-m fast`` is exactly those folders, and
    refuse a test there that needs what makes a test slow: it belongs in tests/integration/."""
    wrong = []
    for item in items:
        path = item.path.resolve()
        if not path.is_relative_to(TESTS) or path.relative_to(TESTS).parts[0] not in FAST_FOLDERS:
            continue
        slow = sorted(SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())))
        slow += sorted(SLOW_MARKERS.intersection(m.name for m in item.iter_markers()))
        if slow:
            wrong.append(f"{item.nodeid}: {', '.join(slow)}")
        item.add_marker(pytest.mark.fast)
    if wrong:
        raise pytest.UsageError(
            "tests in a fast folder (make test-fast) that need the sandbox API server or are marked "
            "integration/e2e; move them to tests/integration/:\n  " + "\n  ".join(wrong)
        )


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
