"""Shared fixtures: a real redis-server and the sandbox API server, each on a free port; and the
``fast`` marker, given by folder, that ``make test-fast`` selects."""

from __future__ import annotations

import os
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


#: The environment the session began with: each test module leaves it so (see below).
_ENVIRONMENT_AT_START: dict[str, str] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    _ENVIRONMENT_AT_START.update(os.environ)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A module's tests leave the process environment as the session found it, once its fixtures
    are gone: processes a later test starts inherit it, and under xdist which modules share a
    worker process, in which order, changes from run to run. A leak fails the last test of the
    module, names the variables, and is undone so that it spoils nothing else."""
    yield
    if nextitem is not None and nextitem.path == item.path:
        return
    changed = sorted(
        key
        for key in set(os.environ) | set(_ENVIRONMENT_AT_START)
        if os.environ.get(key) != _ENVIRONMENT_AT_START.get(key)
    )
    if not changed:
        return
    for key in changed:
        if key in _ENVIRONMENT_AT_START:
            os.environ[key] = _ENVIRONMENT_AT_START[key]
        else:
            del os.environ[key]
    raise AssertionError(
        f"{item.path.name} left environment variables changed: {', '.join(changed)} "
        "(use monkeypatch.setenv/delenv, or undo them in the fixture that sets them)"
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
