"""The request edge on the wire: it sends what the official client's generic path sends (headers,
auth, URL, body), pre-encoded bodies byte for byte, refreshes the token per request, follows
redirects, maps errors to ``ApiException``; and it works over TLS with a bearer token against the
sandbox API server (``--authorization-mode RBAC`` serves https with a self-signed CA).

The wire tests use a real HTTP server of their own that records each request as it arrived and
answers what the test queued."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mcm_sandbox.procs import ApiServer
from mcm_tasks import kinds
from mcm_tasks.kube import clients, ops, rest
from mcm_tasks.kube.ratelimit import limiter_of
from mcm_tasks.settings import load_settings
from tests.sandbox.apiserver_support import unique

pytestmark = pytest.mark.integration


@dataclass
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    #: the client's (address, port): one per connection
    peer: tuple[str, int] = ("", 0)


@dataclass
class Wire:
    url: str
    seen: list[Seen] = field(default_factory=list)
    #: (status, headers, body) answers, in order; when empty, 200 with ``{"echo": <path>}``
    answers: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)
    #: set: requests wait for it (at most 5 s) before they are answered
    hold: threading.Event | None = None


@pytest.fixture()
def wire() -> Iterator[Wire]:
    state = Wire("")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the API server

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            state.seen.append(
                Seen(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                    (str(self.client_address[0]), int(self.client_address[1])),
                )
            )
            if state.hold is not None:
                state.hold.wait(5)
            status, headers, answer = (
                state.answers.pop(0) if state.answers else (200, {}, json.dumps({"echo": self.path}).encode())
            )
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that timed out closed its end: nothing to report

    server = Server(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def api_of(host: str, token: str = "t0ken") -> client.ApiClient:
    cfg = client.Configuration(host=host)
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    api = client.ApiClient(cfg)
    api.user_agent = "mcm-tasks/test"
    return api


def official(api: client.ApiClient, method: str, path: str, query: Any, body: Any, ctype: str | None) -> None:
    """The generic path the edge replaced: ``param_serialize`` + ``call_api``."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = ctype or "application/json"
    serialized = api.param_serialize(
        method,
        path,
        query_params=list(query),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    api.call_api(*serialized).read()


CASES = [
    ("GET", "/apis/machine.sapcloud.io/v1alpha1/namespaces/default/machines/m", [], None, None),
    (
        "GET",
        "/api/v1/pods",
        [
            ("labelSelector", "a in (x, y),b!=c"),
            ("fieldSelector", "spec.nodeName=n/1"),
            ("limit", 500),
            ("watch", True),
        ],
        None,
        None,
    ),
    (
        "PATCH",
        "/api/v1/namespaces/default/events/e.1",
        [],
        {"count": 2, "message": "ünï ✓"},
        "application/merge-patch+json",
    ),
    (
        "PATCH",
        "/api/v1/nodes/n",
        [],
        [{"op": "remove", "path": "/spec/taints/0"}],
        "application/json-patch+json",
    ),
    ("POST", "/api/v1/namespaces/default/events", [], {"metadata": {"name": "e"}, "count": 1}, None),
    (
        "DELETE",
        "/api/v1/namespaces/default/pods/p",
        [],
        {"kind": "DeleteOptions", "gracePeriodSeconds": 0},
        None,
    ),
]


@pytest.mark.parametrize(("method", "path", "query", "body", "ctype"), CASES)
def test_the_edge_sends_what_the_official_generic_path_sends(
    wire: Wire, method: str, path: str, query: list[tuple[str, Any]], body: Any, ctype: str | None
) -> None:
    official(api_of(wire.url), method, path, query, body, ctype)
    assert rest.request(api_of(wire.url), method, path, query=query, body=body, content_type=ctype) == {
        "echo": wire.seen[-1].target
    }
    before, after = wire.seen
    assert (after.method, after.target) == (before.method, before.target)
    ignored = {"content-length"}  # bodies differ in whitespace only (orjson is compact)
    assert {k: v for k, v in after.headers.items() if k not in ignored} == {
        k: v for k, v in before.headers.items() if k not in ignored
    }
    assert after.headers["authorization"] == "Bearer t0ken"
    assert after.headers["user-agent"] == "mcm-tasks/test"
    assert (json.loads(after.body) if after.body else None) == (
        json.loads(before.body) if before.body else None
    )


def test_a_pre_encoded_body_is_sent_byte_for_byte(wire: Wire) -> None:
    raw = b'{ "metadata" :{"name":"e"},  "message": "\\u00fc spaced",\n"count": 1 }'
    rest.request(api_of(wire.url), "POST", "/api/v1/namespaces/default/events", body=raw)
    assert wire.seen[-1].body == raw
    assert wire.seen[-1].headers["content-type"] == "application/json"
    assert wire.seen[-1].headers["content-length"] == str(len(raw))


def test_the_token_is_asked_for_before_every_request(wire: Wire) -> None:
    """A kubeconfig's exec/OIDC credentials and the in-cluster token file refresh through the
    configuration's ``refresh_api_key_hook``: every request asks it again."""
    api = api_of(wire.url)
    tokens = iter(["one", "two", "three"])
    api.configuration.refresh_api_key_hook = lambda cfg: cfg.api_key.update(authorization=next(tokens))
    for _ in range(3):
        rest.request(api, "GET", "/api/v1/nodes")
    assert [s.headers["authorization"] for s in wire.seen] == ["Bearer one", "Bearer two", "Bearer three"]


def test_errors_raise_api_exception_with_status_reason_headers_and_body(wire: Wire) -> None:
    status = {"kind": "Status", "status": "Failure", "reason": "Conflict", "code": 409, "message": "changed"}
    wire.answers.append((409, {"Audit-Id": "a-1"}, json.dumps(status).encode()))
    with pytest.raises(ApiException) as err:
        ops.patch(api_of(wire.url), kinds.MACHINE.resource, "m", {"spec": {}}, "default")
    assert (err.value.status, err.value.reason) == (409, "Conflict")
    assert json.loads(err.value.body) == status
    assert err.value.headers["Audit-Id"] == "a-1"
    # the connection went back to the pool: the next request works on it
    assert rest.request(api_of(wire.url), "GET", "/healthz") == {"echo": "/healthz"}


def test_a_redirect_on_the_same_server_is_followed_with_its_body(wire: Wire) -> None:
    wire.answers.append((307, {"Location": "/moved/here"}, b""))
    answer = rest.request(
        api_of(wire.url), "PATCH", "/api/v1/nodes/n", body={"spec": {"unschedulable": True}}
    )
    assert answer == {"echo": "/moved/here"}
    assert [(s.method, s.target) for s in wire.seen] == [
        ("PATCH", "/api/v1/nodes/n"),
        ("PATCH", "/moved/here"),
    ]
    assert json.loads(wire.seen[-1].body) == {"spec": {"unschedulable": True}}
    assert wire.seen[-1].headers["authorization"] == "Bearer t0ken"


def test_a_redirect_to_another_server_is_refused(wire: Wire) -> None:
    """Deliberate: the official client's PoolManager would follow it (without the token); an API
    server sends none, and the edge sends its requests to the configured server only."""
    wire.answers.append((307, {"Location": "http://elsewhere.invalid/x"}, b""))
    with pytest.raises(urllib3.exceptions.HostChangedError):
        rest.request(api_of(wire.url), "GET", "/api/v1/nodes")
    assert len(wire.seen) == 1


def test_a_host_with_a_path_keeps_it(wire: Wire) -> None:
    api = api_of(wire.url + "/k8s/clusters/c-1")
    rest.request(api, "GET", "/api/v1/nodes", query={"limit": 1})
    assert wire.seen[-1].target == "/k8s/clusters/c-1/api/v1/nodes?limit=1"
    assert rest.get_text(api, "/healthz") == (200, json.dumps({"echo": "/k8s/clusters/c-1/healthz"}))


def test_timeouts_apply(wire: Wire) -> None:
    """The read timeout reaches the socket: a server that does not answer in time is an error."""
    wire.hold = threading.Event()
    try:
        with pytest.raises(urllib3.exceptions.MaxRetryError, match="timed out"):
            rest.request(api_of(wire.url), "GET", "/api/v1/nodes", timeout=(1.0, 0.2))
    finally:
        wire.hold.set()


# --- TLS and a bearer token: the sandbox's RBAC mode -----------------------------------------------


@pytest.fixture(scope="module")
def secure_server(workdir: Path) -> Iterator[ApiServer]:
    server = ApiServer(workdir / "apiserver-edge-tls", extra_args=["--authorization-mode", "RBAC"]).start()
    yield server
    server.stop()


def test_seed_namespaces_send_through_one_connection_each_with_its_own_budget(
    wire: Wire, redis_url: str, tmp_path: Path
) -> None:
    """Each namespace's control client keeps its budget, and they share the connection: a
    namespace's next request a minute later finds it warm (its own pool had gone cold)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": wire.url}}],
                "users": [{"name": "u", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    tenants = [
        clients.tenant_control(
            load_settings({"control_kubeconfig": str(kubeconfig), "redis_url": redis_url,
                           "namespace": f"shoot--{name}"})
        )
        for name in "abc"
    ]  # fmt: skip
    for cluster in tenants:
        rest.request(cluster.api, "GET", "/api/v1/namespaces/default/pods/p")
    assert len(wire.seen) == 3
    assert len({seen.peer for seen in wire.seen}) == 1, wire.seen
    limiters = [limiter_of(cluster.api) for cluster in tenants]
    assert all(limiters) and len({id(limiter) for limiter in limiters}) == 3


def test_the_controller_clients_work_over_tls_with_a_token(secure_server: ApiServer, redis_url: str) -> None:
    kubeconfig = str(secure_server.kubeconfig)
    settings = load_settings(
        {"control_kubeconfig": kubeconfig, "target_kubeconfig": "none", "redis_url": redis_url}
    )
    cluster = clients.new_cluster("control", kubeconfig, settings)
    try:
        api = cluster.api
        assert api.configuration.host.startswith("https://")
        name = unique("edge")
        path = "/api/v1/namespaces/default/configmaps"
        made = rest.request(api, "POST", path, body={"metadata": {"name": name}, "data": {"a": "1"}})
        assert made["metadata"]["name"] == name
        rest.request(api, "PATCH", f"{path}/{name}", body={"data": {"b": "2"}},
                     content_type="application/merge-patch+json")  # fmt: skip
        assert rest.request(api, "GET", f"{path}/{name}")["data"] == {"a": "1", "b": "2"}
        with pytest.raises(ApiException) as err:
            rest.request(api, "GET", f"{path}/{name}-missing")
        assert err.value.status == 404 and json.loads(err.value.body)["reason"] == "NotFound"
        edge = limiter_of(api)
        assert edge is not None and edge.direct and edge._pool is not None  # the TLS pool, used directly
        assert edge._pool.scheme == "https"
    finally:
        cluster.close()


def test_a_wrong_token_and_an_untrusted_server_fail_as_with_the_official_client(
    secure_server: ApiServer,
) -> None:
    admin = client.ApiClient(clients.load_configuration(str(secure_server.kubeconfig), "control_kubeconfig"))
    doc = yaml.safe_load(secure_server.kubeconfig.read_text())
    doc["users"][0]["user"]["token"] = "forged"
    forged_kubeconfig = secure_server.kubeconfig.with_name("forged-kubeconfig")
    forged_kubeconfig.write_text(yaml.safe_dump(doc))
    forged = client.ApiClient(clients.load_configuration(str(forged_kubeconfig), "control_kubeconfig"))
    with pytest.raises(ApiException) as err:
        rest.request(forged, "GET", "/api/v1/namespaces/default/configmaps")
    assert err.value.status == 401
    untrusted = client.Configuration(host=admin.configuration.host)
    untrusted.api_key = dict(admin.configuration.api_key)
    with pytest.raises(Exception) as typed:
        client.CoreV1Api(client.ApiClient(untrusted)).list_namespaced_config_map("default")
    with pytest.raises(Exception) as ours:
        rest.request(client.ApiClient(untrusted), "GET", "/api/v1/namespaces/default/configmaps")
    assert type(ours.value) is type(typed.value)
    assert "CERTIFICATE_VERIFY_FAILED" in str(ours.value)


def test_a_configured_proxy_gets_the_request_as_the_official_client_sends_it(wire: Wire) -> None:
    api = api_of("http://kube.invalid:6443")
    api.configuration.proxy = wire.url
    assert rest.request(api, "GET", "/api/v1/nodes", query={"limit": 2}) == {
        "echo": "http://kube.invalid:6443/api/v1/nodes?limit=2"
    }
    assert wire.seen[-1].headers["authorization"] == "Bearer t0ken"
