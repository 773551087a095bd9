"""The in-process cache of MachineClass secret data: read from the API server, kept for a short time,
read again at once when the mirror shows a new resourceVersion; nothing kept with a zero TTL."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from mcm_tasks.controllers.common.secretdata_io import SecretDataCache, decode_secret_data
from mcm_tasks.settings import configure, get_settings, reset_settings


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Api:
    """The API server's side: what a GET returns, and how many GETs were made."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.gets = 0

    def put(self, name: str, rv: str, data: Mapping[str, str]) -> None:
        self.secrets[("ns", name)] = {"metadata": {"name": name, "resourceVersion": rv}, "data": dict(data)}

    def fetch(self, name: str, namespace: str) -> dict[str, Any] | None:
        self.gets += 1
        return self.secrets.get((namespace, name))


@pytest.fixture()
def ttl() -> Iterator[None]:
    configure({"secret_cache_ttl": "30s"})
    yield
    reset_settings()


def test_decode_merges_string_data_over_data() -> None:
    assert decode_secret_data({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "z"}}) == {
        "a": b"x",
        "b": b"z",
    }


def test_cached_while_young_and_at_the_mirrored_version(ttl: None) -> None:
    clock, api = Clock(), Api()
    cache = SecretDataCache(clock)
    api.put("s", "1", {"userData": "aGk="})
    assert cache.get("s", "ns", api.fetch, "1", ttl=get_settings().secret_cache_ttl) == {"userData": b"hi"}
    assert cache.get("s", "ns", api.fetch, "1", ttl=get_settings().secret_cache_ttl) == {"userData": b"hi"}
    assert cache.get("s", "ns", api.fetch, None, ttl=get_settings().secret_cache_ttl) == {"userData": b"hi"}
    assert api.gets == 1

    api.put("s", "2", {"userData": "eW8="})  # edited: the mirror shows version 2
    assert cache.get("s", "ns", api.fetch, "2", ttl=get_settings().secret_cache_ttl) == {"userData": b"yo"}
    assert api.gets == 2

    clock.now += 31  # too old, whatever the mirror says
    assert cache.get("s", "ns", api.fetch, "2", ttl=get_settings().secret_cache_ttl) == {"userData": b"yo"}
    assert api.gets == 3


def test_a_missing_secret_is_none_and_read_again_once_it_appears(ttl: None) -> None:
    clock, api = Clock(), Api()
    cache = SecretDataCache(clock)
    assert cache.get("s", "ns", api.fetch, None, ttl=get_settings().secret_cache_ttl) is None
    api.put("s", "5", {"k": "dg=="})
    assert cache.get("s", "ns", api.fetch, "5", ttl=get_settings().secret_cache_ttl) == {"k": b"v"}
    assert api.gets == 2


def test_a_zero_ttl_keeps_nothing() -> None:
    configure({"secret_cache_ttl": "0"})
    try:
        clock, api = Clock(), Api()
        cache = SecretDataCache(clock)
        api.put("s", "1", {"k": "dg=="})
        for _ in range(3):
            assert cache.get("s", "ns", api.fetch, "1", ttl=get_settings().secret_cache_ttl) == {"k": b"v"}
        assert api.gets == 3
    finally:
        reset_settings()
