"""One JSON request through an official-client ``ApiClient``.

The generated typed APIs (``CoreV1Api``…) turn responses into per-kind model classes; the
controller works on plain API dicts and pydantic models, for built-in and custom kinds alike. So
the operations helpers go one level down, to the ``ApiClient``'s own request path: the same
configuration, authentication (token refresh included), TLS, connection pool and rate limit as the
typed APIs, without a per-kind method table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

Query = Mapping[str, Any] | Sequence[tuple[str, Any]]
Timeout = float | tuple[float, float] | None


def _query_pairs(query: Query | None) -> list[tuple[str, Any]]:
    if not query:
        return []
    pairs = list(query.items()) if isinstance(query, Mapping) else list(query)
    return [(k, v) for k, v in pairs if v is not None]


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

    Streaming callers (watches) read ``.response`` themselves; the status has already been checked.
    """
    headers: dict[str, Any] = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type or "application/json"
    serialized = api.param_serialize(
        method,
        path,
        query_params=_query_pairs(query),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(*serialized, _request_timeout=timeout)
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
    return json.loads(data) if data else None


def get_text(api: ApiClient, path: str, timeout: Timeout = None) -> tuple[int, str]:
    """Status and body of a plain GET (``/healthz``), without raising on a non-2xx answer."""
    serialized = api.param_serialize("GET", path, header_params={}, auth_settings=["BearerToken"])
    resp = api.call_api(*serialized, _request_timeout=timeout)
    try:
        data = resp.read()
    finally:
        resp.response.release_conn()
    return int(resp.status), (data or b"").decode("utf-8", errors="replace")
