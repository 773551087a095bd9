"""One JSON request through an official-client ``ApiClient``: the one edge every API call goes through.

The generated typed APIs (``CoreV1Api``…) turn responses into per-kind model classes; the
controller works on plain API dicts and pydantic models, for built-in and custom kinds alike. So
the operations helpers go one level down, to the ``ApiClient``'s own request path: the same
configuration, authentication, TLS, connection pool, retries and rate limit as the typed APIs,
without a per-kind method table.

Credentials rotate under a running process (a ``tokenFile`` rewritten by Gardener, the pod's bound
ServiceAccount token, an exec plugin's expiring credential, replaced client certificates): the
``ClusterCredentials`` a configuration carries (``credentials_io``) are asked before every request
of ``EdgeRESTClient``, typed or ours, and after a 401, when the request is sent once more if they
changed. So a process outlives its first token.

A machine costs 15-20 requests over its life, so the client's CPU per request is paid by every
reconcile. Measured (bench/api_request.py), the generic path spent it on work our plain-dict
requests do not need: ``param_serialize`` walks every body through ``sanitize_for_serialization``
and the REST layer encodes it again with ``json``; ``PoolManager.request`` parses the URL back and
looks its pool up again on every request. So this edge builds the headers, the URL and the body
itself (the body once, with orjson; ``sanitize_for_serialization`` and ``json`` only for what
orjson cannot encode), still asking the ``ApiClient`` for the parts with semantics (default headers, cookie,
``update_params_for_auth``, ``parameters_to_url_query``), and
``EdgeRESTClient`` sends an encoded body through the host's urllib3 pool directly, the pool the
``PoolManager`` made from the configuration (TLS, ``retries``, ``connection_pool_maxsize``). Anything
else (a proxy, form posts, client-go read retries, a URL of another host) takes the official path.
The costliest part was elsewhere: with a token from a kubeconfig or the in-cluster service account,
the official loaders' refresh hook re-read the process's environment for a proxy before every
request (see ``EdgeRESTClient.__init__``; our configurations have no such hook).
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTClientObject, RESTResponse
from urllib3.connectionpool import HTTPConnectionPool

from mcm_tasks.kube.credentials_io import ClusterCredentials, credentials_of

Query = Mapping[str, Any] | Sequence[tuple[str, Any]]
Timeout = float | tuple[float, float] | None

JSON = "application/json"
AUTH = ["BearerToken"]  # what every generated API method asks for

#: idle connections a shared pool (``share_pool``) keeps per server. At least as many as its clients
#: hold at once: a seed informer holds one per watch, five per namespace (a seed of 200 shoots: 1000),
#: and a watch that ends gives its connection back; a pool found full closes the connection and
#: urllib3 logs a warning, at every watch's end. The server closes idle ones after its own timeout.
SHARED_POOL_MAXSIZE = 4096

#: configuration → (pid, credentials generation, the pool manager its shared clients send through)
_shared_pools: weakref.WeakKeyDictionary[Any, tuple[int, int, urllib3.PoolManager]] = (
    weakref.WeakKeyDictionary()
)
_shared_lock = threading.Lock()


class EdgeRESTClient(RESTClientObject):
    """The official REST layer, with a short way for a request whose body is already encoded.

    ``request`` with a ``bytes`` body (or none) goes straight to the urllib3 pool of the configured
    host, as ``PoolManager.urlopen`` would after parsing the URL and looking the pool up (same pool,
    retries, timeout, TLS; some 40 µs less per request). Every other request (a dict body from a
    typed API, form parameters, a proxy, client-go read retries) is the official
    ``RESTClientObject.request``.
    """

    def __init__(self, configuration: Any) -> None:
        super().__init__(configuration)
        # The pool manager above was built with the proxy of this moment and never looks again. A
        # proxy left "from the environment" makes every assignment of ``configuration.host`` read
        # all environment variables again (``getproxies``), and the token refresh hooks of a
        # kubeconfig and of the in-cluster config assign it before every request: 100-350 µs a
        # request with 35-70 variables (a pod's service links add more), as much as the rest of
        # the request. Pinned, the host setter leaves the proxy alone.
        configuration.proxy = configuration.proxy
        self._route()
        #: the credentials this client's configuration carries (``credentials_io``), kept current
        self.credentials = credentials_of(configuration)
        self.generation = self.credentials.generation if self.credentials else 0
        self._rebuild_lock = threading.Lock()
        #: called on a 401 when the credentials are not ours to re-read (a seed-mode tenant's target,
        #: its token inline from a Secret: ``clients.tenant_clusters`` reads the Secrets again)
        self.on_unauthorized: Callable[[], None] | None = None
        #: whether this client sends through its configuration's shared pool (``share_pool``)
        self.shared = False

    def _route(self) -> None:
        host = str(self.configuration.host)
        scheme_end = host.find("://")
        path_start = host.find("/", scheme_end + 3) if scheme_end >= 0 else -1
        #: ``scheme://authority`` of the configured host: URLs under it use its pool directly
        self.origin = host if path_start < 0 else host[:path_start]
        # a ProxyManager (a configured proxy) rewrites requests: it keeps the whole of them
        self.direct = scheme_end >= 0 and type(self.pool_manager) is urllib3.PoolManager
        self._pool: HTTPConnectionPool | None = None

    def _follow_credentials(self, credentials: ClusterCredentials) -> None:
        """A new host or new TLS material (a replaced client certificate, CA, or an exec plugin's
        new certificate): a new pool manager from the configuration. The old one is not closed:
        another thread may be in a request on it; its connections close when it is collected."""
        with self._rebuild_lock:
            generation = credentials.generation
            if generation == self.generation:
                return
            credentials.apply_tls(self.configuration)
            RESTClientObject.__init__(self, self.configuration)
            self._route()
            self.generation = generation
            if self.shared:
                self.adopt_shared_pool()

    def adopt_shared_pool(self) -> None:
        """Send through the pool manager every shared client of this configuration uses in this
        process (``share_pool``): the first client of a credentials generation lends its own, so a
        rotation moves them all to one new pool again."""
        configuration = self.configuration
        with _shared_lock:
            found = _shared_pools.get(configuration)
            if found is None or found[:2] != (os.getpid(), self.generation):
                manager = self.pool_manager
                kw = manager.connection_pool_kw
                kw["maxsize"] = max(int(kw.get("maxsize") or 1), SHARED_POOL_MAXSIZE)
                found = _shared_pools[configuration] = (os.getpid(), self.generation, manager)
        self.shared = True
        if self.pool_manager is not found[2]:
            self.pool_manager = found[2]
            self._route()

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, Any] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Timeout = None,
    ) -> RESTResponse:
        """One request; with credentials that rotate (``credentials_io``), the current ones, and on
        a 401 the credentials read again and the request sent once more if they changed."""
        credentials = self.credentials
        if credentials is None:
            resp = self._request(method, url, headers, body, post_params, _request_timeout)
            if resp.status == 401 and self.on_unauthorized is not None:
                self.on_unauthorized()
            return resp
        credentials.maybe_reload()
        headers = dict(headers or {})
        credentials.authorize(headers)
        generation = self.generation
        resp = self._request(method, url, headers, body, post_params, _request_timeout, credentials)
        if resp.status != 401 or not credentials.unauthorized(credentials_sent(headers), generation):
            return resp
        resp.response.drain_conn()
        resp.response.release_conn()
        credentials.authorize(headers)
        return self._request(method, url, headers, body, post_params, _request_timeout, credentials)

    def _request(
        self,
        method: str,
        url: str,
        headers: dict[str, Any] | None,
        body: Any,
        post_params: Any,
        _request_timeout: Timeout,
        credentials: ClusterCredentials | None = None,
    ) -> RESTResponse:
        if credentials is not None and credentials.generation != self.generation:
            self._follow_credentials(credentials)
        if (
            post_params
            or not (body is None or isinstance(body, bytes))
            or (method in ("GET", "HEAD") and getattr(self.configuration, "client_go_retries", False))
        ):
            return super().request(method, url, headers, body, post_params, _request_timeout)
        timeout = _timeout(_request_timeout)
        try:
            return RESTResponse(self._urlopen(method, url, headers or {}, body, timeout))
        except urllib3.exceptions.SSLError as err:  # as the official layer reports it
            raise ApiException(status=0, reason=f"{type(err).__name__}\n{err}") from err

    def _urlopen(
        self, method: str, url: str, headers: dict[str, Any], body: bytes | None, timeout: Any
    ) -> urllib3.BaseHTTPResponse:
        origin = self.origin
        uri = url[len(origin) :] if self.direct and url.startswith(origin) else None
        if uri is None or (uri and uri[0] not in "/?"):
            return self.pool_manager.urlopen(
                method, url, body=body, headers=headers, timeout=timeout, preload_content=False
            )
        pool = self._pool
        if pool is None or pool.pool is None:  # first use, or closed by ``close()``: the manager's again
            pool = self._pool = self.pool_manager.connection_from_url(origin)
        # the pool follows a redirect to the same server as the PoolManager would (303, retries,
        # headers); one to another server raises ``HostChangedError`` (the API server sends none)
        return pool.urlopen(
            method, uri or "/", body=body, headers=headers, timeout=timeout, preload_content=False
        )


def credentials_sent(headers: Mapping[str, Any]) -> str | None:
    """The ``Authorization`` a request went out with."""
    for name, value in headers.items():
        if name.lower() == "authorization":
            return str(value)
    return None


def _timeout(value: Timeout) -> urllib3.Timeout | None:
    """``_request_timeout`` as the official REST layer reads it: a total, or (connect, read)."""
    if not value:
        return None
    if isinstance(value, int | float):
        return urllib3.Timeout(total=value)
    if isinstance(value, tuple) and len(value) == 2:
        return urllib3.Timeout(connect=value[0], read=value[1])
    return None


def install_edge(api: ApiClient) -> ApiClient:
    """Give ``api`` an ``EdgeRESTClient`` built from its configuration (unless its REST client is one
    already, as a rate-limited one is); returns the same client.

    The old REST client is not closed: another thread may be in a request on it, and its idle
    connections close when it is collected.
    """
    if not isinstance(api.rest_client, EdgeRESTClient):
        api.rest_client = EdgeRESTClient(api.configuration)
    return api


def share_pool(api: ApiClient) -> ApiClient:
    """Make ``api`` send through one connection pool with every other client of its configuration
    that shares it in this process (its rate limit stays its own); returns the same client.

    Seed mode gives each namespace a client of the one control cluster, each with a budget of its
    own. With a pool each, a worker held a connection per namespace, and a namespace's requests come
    a minute apart at rest (its safety job, on whichever worker takes it): past the server's idle
    timeout (kube-apiserver's 90 s, the sandbox's 75 s), so nearly every one paid a new connection
    and TLS handshake, 3.7 ms of client CPU against 0.5 ms for the request itself. Shared, the
    namespaces' requests keep one or two connections per worker warm. Not for clients of
    different servers (a tenant's target): they cannot share connections.
    """
    install_edge(api)
    edge = api.rest_client
    assert isinstance(edge, EdgeRESTClient)
    edge.adopt_shared_pool()
    return api


def encode(api: ApiClient, body: Any) -> bytes:
    """A request body as JSON bytes: ``bytes`` as given; dicts, lists and what orjson encodes
    natively at once; anything else (a typed model, an integer beyond 64 bits) as the official
    client encodes it, ``sanitize_for_serialization`` then ``json``."""
    if isinstance(body, bytes):
        return body
    try:
        return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(api.sanitize_for_serialization(body)).encode()


#: every digit to ``0``, every other byte to a space: a run of 19 digits (the shortest number orjson
#: may read as a float instead of an integer) is then a plain substring search, ten times cheaper
#: than a regular expression over the answer
DIGITS = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
LONG_NUMBER = b"0" * 19


def decode(data: bytes) -> Any:
    """A JSON answer: orjson, which decodes an answer several times faster than ``json`` (a status
    write's answer is a whole Machine), except where it would change a value. orjson turns an
    integer beyond 64 bits (a user's value in a provider spec) into a float, which a
    read-modify-write would then send back, and refuses ``NaN``: an answer holding 19 digits in a
    row (a long integer, or only a long string of digits) or that orjson refuses is ``json``'s."""
    if LONG_NUMBER not in data.translate(DIGITS):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def _query_pairs(query: Query | None) -> list[tuple[str, Any]]:
    if not query:
        return []
    pairs = list(query.items()) if isinstance(query, Mapping) else list(query)
    return [(k, v) for k, v in pairs if v is not None]


def _send(
    api: ApiClient,
    method: str,
    path: str,
    query: Query | None,
    body: Any,
    content_type: str | None,
    timeout: Timeout,
    accept: str | None = JSON,
) -> RESTResponse:
    """Headers and URL as ``param_serialize`` builds them, then ``call_api``."""
    if not isinstance(api.rest_client, EdgeRESTClient):
        install_edge(api)
    headers: dict[str, Any] = {"Accept": accept} if accept else {}
    payload = None
    if body is not None:
        headers["Content-Type"] = content_type or JSON
        payload = encode(api, body)
    headers.update(api.default_headers)
    if api.cookie:
        headers["Cookie"] = api.cookie
    queries = _query_pairs(query)
    api.update_params_for_auth(headers, queries, AUTH, path, method, payload)
    url = api.configuration.host + path
    if queries:
        url += "?" + api.parameters_to_url_query(queries, None)
    return api.call_api(method, url, headers, payload, None, _request_timeout=timeout)


def open_request(
    api: ApiClient,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: Timeout = None,
) -> Any:
    """Send a request and return the client's ``RESTResponse`` unread, or raise ``ApiException``.

    ``body``: anything JSON-encodable, or ``bytes`` already encoded (sent as they are). Streaming
    callers (watches) read ``.response`` themselves; the status has already been checked.
    """
    resp = _send(api, method, path, query, body, content_type, timeout)
    if not 200 <= resp.status <= 299:
        resp.read()
        text = resp.data.decode("utf-8", errors="replace") if resp.data else None
        try:
            raise ApiException.from_response(http_resp=resp, body=text, data=None)
        finally:
            resp.response.release_conn()
    return resp


def request(
    api: ApiClient,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: Timeout = None,
) -> Any:
    """Send a request and return its decoded JSON body (``None`` when empty)."""
    resp = open_request(api, method, path, query=query, body=body, content_type=content_type, timeout=timeout)
    try:
        data = resp.read()
    finally:
        resp.response.release_conn()
    return decode(data) if data else None


def get_text(api: ApiClient, path: str, timeout: Timeout = None) -> tuple[int, str]:
    """Status and body of a plain GET (``/healthz``), without raising on a non-2xx answer."""
    resp = _send(api, "GET", path, None, None, None, timeout, accept=None)
    try:
        data = resp.read()
    finally:
        resp.response.release_conn()
    return int(resp.status), (data or b"").decode("utf-8", errors="replace")
