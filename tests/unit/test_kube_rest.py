"""The request edge's pure parts: body encoding and decoding, timeouts, which requests take the
short way to the pool (the wire behaviour is in tests/integration/test_kube_rest.py)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from kubernetes.client import ApiClient, Configuration, V1ObjectMeta
from kubernetes.client.rest import RESTClientObject

from mcm_tasks.kube import clients, rest
from mcm_tasks.kube.ratelimit import RateLimitedRESTClient, install_rate_limit


def api(host: str = "http://127.0.0.1:1", **settings: object) -> ApiClient:
    cfg = Configuration(host=host)
    for key, value in settings.items():
        setattr(cfg, key, value)
    return ApiClient(cfg)


def test_bytes_are_sent_as_given() -> None:
    raw = b'{ "b": 1,  "a": [ ] }'
    assert rest.encode(api(), raw) is raw


@pytest.mark.parametrize(
    "body",
    [
        {"metadata": {"name": "m", "labels": {"a": "b"}}, "spec": {"n": 1, "f": 0.5, "t": True, "z": None}},
        [{"op": "replace", "path": "/spec/n", "value": 2}],
        {"message": "ünïcode ✓", "nested": [[1, 2], {"k": []}]},
    ],
)
def test_plain_bodies_encode_to_the_json_the_official_client_sends(body: object) -> None:
    client = api()
    official = json.loads(json.dumps(client.sanitize_for_serialization(body)))
    assert json.loads(rest.encode(client, body)) == official


def test_what_orjson_cannot_encode_is_encoded_as_the_official_client_does() -> None:
    client = api()
    body = {"metadata": V1ObjectMeta(name="m", labels={"a": "b"}), 3: "int key", "at": dt.date(2024, 1, 2)}
    official = json.dumps(client.sanitize_for_serialization(body))
    assert (
        json.loads(rest.encode(client, body))
        == json.loads(official)
        == {
            "metadata": {"name": "m", "labels": {"a": "b"}},
            "3": "int key",
            "at": "2024-01-02",
        }
    )
    big = {"spec": {"providerSpec": {"n": 123456789012345678901234567890}}}
    assert rest.encode(client, big) == json.dumps(big).encode()


def test_answers_decode_losslessly_even_beyond_64_bits() -> None:
    assert rest.decode(b'{"a": [1, "x", null, 2.5]}') == {"a": [1, "x", None, 2.5]}
    assert rest.decode(b'{"big": 123456789012345678901234567890}') == {"big": 123456789012345678901234567890}
    with pytest.raises(ValueError):
        rest.decode(b"not json")


@pytest.mark.parametrize(
    "text",
    [
        b'{"n": -9223372036854775809}',  # one below int64: orjson reads a float
        b'{"n": 18446744073709551616}',  # one above uint64
        b'{"n": [9223372036854775807, 18446744073709551615, -9223372036854775808]}',
        b'{"n": NaN, "m": Infinity}',  # orjson refuses these
        b'{"s": "1234567890123456789012", "t": 1.5e300, "u": "\\u00e9", "v": {"w": [true, false, null]}}',
    ],
)
def test_orjson_decodes_answers_only_where_it_reads_them_as_json_does(text: bytes) -> None:
    decoded, expected = rest.decode(text), json.loads(text)
    assert repr(decoded) == repr(expected)


@pytest.mark.parametrize(
    ("given", "total", "connect", "read"),
    [(None, None, None, None), (5, 5, None, None), (2.5, 2.5, None, None), ((1.0, 30.0), None, 1.0, 30.0)],
)
def test_timeouts_read_as_the_official_rest_layer_reads_them(
    given: rest.Timeout, total: float | None, connect: float | None, read: float | None
) -> None:
    timeout = rest._timeout(given)
    if given is None:
        assert timeout is None
        return
    assert timeout is not None
    assert (timeout.total, timeout._connect, timeout._read) == (
        total,
        connect if connect is not None else timeout.DEFAULT_TIMEOUT,
        read if read is not None else timeout.DEFAULT_TIMEOUT,
    )


def test_the_edge_rest_client_is_installed_once_and_the_rate_limited_one_is_an_edge() -> None:
    client = api()
    assert type(client.rest_client) is RESTClientObject
    edge = rest.install_edge(client).rest_client
    assert isinstance(edge, rest.EdgeRESTClient)
    assert rest.install_edge(client).rest_client is edge
    install_rate_limit(client, limiter=type("Free", (), {"take": lambda self, tokens=1: 0.0})())
    assert isinstance(client.rest_client, RateLimitedRESTClient)
    assert isinstance(client.rest_client, rest.EdgeRESTClient)


@pytest.mark.parametrize(
    ("host", "origin", "direct"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080", True),
        ("https://api.example:6443/k8s/clusters/c-1", "https://api.example:6443", True),
        ("https://api.example", "https://api.example", True),
    ],
)
def test_the_origin_whose_pool_is_used_directly(host: str, origin: str, direct: bool) -> None:
    edge = rest.EdgeRESTClient(Configuration(host=host))
    assert (edge.origin, edge.direct) == (origin, direct)


def test_a_proxy_keeps_the_official_way_through_its_manager() -> None:
    edge = rest.EdgeRESTClient(Configuration(host="https://api.example:6443"))
    cfg = Configuration(host="https://api.example:6443")
    cfg.proxy = "http://proxy.example:3128"
    proxied = rest.EdgeRESTClient(cfg)
    assert edge.direct and not proxied.direct


def test_the_token_refresh_no_longer_rereads_the_environment_for_a_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The official loaders install a refresh hook that assigns ``configuration.host`` before every
    request; with a proxy "from the environment" that assignment scanned every environment variable
    (``getproxies``), ~250 µs a request. Our credentials are kept current by the request edge
    (``credentials_io``), so the configuration has no hook and a request scans nothing."""
    from kubernetes.client import configuration as configuration_module

    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    client = ApiClient(clients.load_configuration(str(path), "control_kubeconfig"))
    assert client.configuration.refresh_api_key_hook is None
    scans: list[int] = []
    real = configuration_module.getproxies
    monkeypatch.setattr(configuration_module, "getproxies", lambda: scans.append(1) or real())
    headers: dict[str, str] = {}
    rest.install_edge(client)
    for _ in range(3):
        client.update_params_for_auth(headers, [], rest.AUTH, "/api", "GET", None)
    assert scans == []
    assert headers["authorization"] == "Bearer t0ken"


def test_a_proxy_from_the_environment_still_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    client = rest.install_edge(api("https://api.example:6443"))
    edge = client.rest_client
    assert isinstance(edge, rest.EdgeRESTClient)
    assert client.configuration.proxy == "http://proxy.example:3128"
    assert not edge.direct
    client.configuration.host = "https://api.example:6443"  # as a refresh hook does
    assert client.configuration.proxy == "http://proxy.example:3128"


def test_shared_clients_of_a_configuration_send_through_one_pool_and_move_together() -> None:
    """``share_pool``: the clients of one configuration share a pool manager (each keeps its own
    REST client, so its own rate limit); another configuration's do not; a rotation of the
    credentials moves them all to one new manager, not one each."""
    cfg = Configuration(host="https://10.0.0.1:6443")
    a, b = rest.share_pool(ApiClient(cfg)), rest.share_pool(ApiClient(cfg))
    other = rest.share_pool(ApiClient(Configuration(host="https://10.0.0.2:6443")))
    ea, eb = a.rest_client, b.rest_client
    assert isinstance(ea, rest.EdgeRESTClient) and isinstance(eb, rest.EdgeRESTClient)
    assert ea is not eb
    assert ea.pool_manager is eb.pool_manager
    assert other.rest_client.pool_manager is not ea.pool_manager
    assert ea.pool_manager.connection_pool_kw["maxsize"] >= rest.SHARED_POOL_MAXSIZE
    before, rotated = ea.pool_manager, ea.generation + 1

    class Rotated:
        """The configuration's credentials after a rotation (a new client certificate)."""

        generation = rotated

        def apply_tls(self, configuration: Configuration) -> None:
            pass

    ea._follow_credentials(Rotated())  # type: ignore[arg-type]
    eb._follow_credentials(Rotated())  # type: ignore[arg-type]
    assert ea.pool_manager is eb.pool_manager
    assert ea.pool_manager is not before
    assert ea._pool is None and eb._pool is None  # the next request looks its pool up afresh
