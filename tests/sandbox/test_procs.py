"""The servers the tests start take a free port, and another process may bind it first (the suite
runs in parallel workers): such a server starts again on another port, when the port was its own
to choose; one given its port fails with its log."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mcm_sandbox import procs
from mcm_sandbox.procs import ApiServer, RedisServer


@pytest.fixture()
def taken_port() -> Iterator[int]:
    """A port some other process listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


@pytest.fixture()
def first_port_taken(monkeypatch: pytest.MonkeyPatch, taken_port: int) -> int:
    """``free_port`` answers the taken port once, as when another process bound it in between."""
    answers = iter([taken_port])
    real = procs.free_port
    monkeypatch.setattr(procs, "free_port", lambda host="127.0.0.1": next(answers, None) or real(host))
    return taken_port


def test_redis_server_starts_on_another_port_when_its_free_port_was_taken(
    tmp_path: Path, first_port_taken: int
) -> None:
    server = RedisServer(tmp_path).start()
    try:
        assert server.port != first_port_taken
        assert redis.Redis.from_url(server.url).ping()
        assert "in use" in (tmp_path / f"redis-{first_port_taken}.log").read_text().lower()
    finally:
        server.stop()


def test_api_server_starts_on_another_port_when_its_free_port_was_taken(
    tmp_path: Path, first_port_taken: int
) -> None:
    server = ApiServer(tmp_path).start()
    try:
        assert server.port != first_port_taken
        assert procs.http_ok(f"{server.url}/readyz")
    finally:
        server.stop()


def test_server_given_a_taken_port_fails_with_its_log(tmp_path: Path, taken_port: int) -> None:
    with pytest.raises(RuntimeError, match=r"(?i)in use"):
        RedisServer(tmp_path, port=taken_port).start()
