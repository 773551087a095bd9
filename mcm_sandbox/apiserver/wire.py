"""The wire half of the HTTP edge: how kube-apiserver frames a response (compact JSON and a newline,
``Warning: 299`` headers), who the field manager of a write is, and how a request body is read and
decoded (size cap, JSON, YAML, protobuf)."""

from __future__ import annotations

from typing import Any

import yaml
from aiohttp import web
from multidict import CIMultiDict

from mcm_sandbox.apiserver import errors, protobuf
from mcm_sandbox.apiserver.handlers import check_depth, parse_json
from mcm_sandbox.apiserver.store import dumps

MAX_BODY = 3 * 1024 * 1024
JSON = "application/json"


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """An API object or Status as kube-apiserver's JSON serializer writes it: compact, then a newline
    (``json.Encoder.Encode``; clients that print the body, as ``FailToCreateError`` does, show it)."""
    return document(lined(body if isinstance(body, bytes) else dumps(body)), status, headers)


def document(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A document served as is (OpenAPI, /version): no trailing newline, as upstream's raw writers."""
    raw = body if isinstance(body, bytes) else dumps(body)
    return web.Response(body=raw, status=status, content_type=JSON, headers=headers)


def lined(raw: bytes) -> bytes:
    return raw if raw.endswith(b"\n") else raw + b"\n"


def warned(body: bytes, status: int, warnings: list[str]) -> web.Response:
    """A response with one ``Warning: 299`` header per warning, as kube-apiserver sends them."""
    headers = CIMultiDict[str]()
    for text in warnings:
        headers.add("Warning", '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return web.Response(body=lined(body), status=status, content_type=JSON, headers=headers)


def field_manager(request: web.Request, query: dict[str, str]) -> str:
    """The field manager of a write: ``fieldManager``, else the user agent's product, printable
    characters only and at most 128 bytes (``managerOrUserAgent``, ``prefixFromUserAgent``)."""
    given = query.get("fieldManager")
    if given:
        return given
    out, size = "", 0
    for char in request.headers.get("User-Agent", "").split("/")[0]:
        if not char.isprintable():
            continue
        size += len(char.encode())
        if size > 128:
            break
        out += char
    return out


def query_of(request: web.Request) -> dict[str, str]:
    return {k: v for k, v in request.query.items()}


async def read_body(request: web.Request, required: bool) -> bytes:
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise errors.too_large()
    raw = await request.read()
    if len(raw) > MAX_BODY:
        raise errors.too_large()
    if required and not raw:
        raise errors.bad_request("the body of the request is empty")
    return raw


async def object_body(request: web.Request) -> Any:
    raw = await read_body(request, True)
    media = request.content_type.lower()
    if media in ("application/yaml", "application/x-yaml"):
        try:
            return check_depth(yaml.safe_load(raw))
        except RecursionError:
            raise errors.bad_request("error decoding YAML request body: exceeded max depth") from None
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error decoding YAML request body: {exc}") from exc
    if media == protobuf.PROTOBUF:
        return protobuf.decode(raw)
    if media not in (JSON, "application/octet-stream"):
        raise errors.unsupported_media(request.content_type)
    return parse_json(raw)
