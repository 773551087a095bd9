"""Decode the Kubernetes protobuf request bodies kubectl's typed clients send.

kubectl's typed commands (``create <kind>``, ``auth can-i``, ``create token``, ``drain``) encode
their bodies as ``application/vnd.kubernetes.protobuf`` and do not retry as JSON, so the sandbox
decodes every kind those commands send (``protobuf_kinds``); anything else gets 415. Responses are
always JSON, which these clients also accept.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from mcm_sandbox.apiserver import errors
from mcm_sandbox.apiserver.protobuf_kinds import KEEP_ZERO, KINDS, TIME, Schema

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((number, value))
    return out


def _scalar(kind: Any, value: int | bytes) -> Any:
    if kind == "str":
        return bytes(value).decode() if isinstance(value, bytes) else str(value)
    if kind == "bytes":
        return base64.b64encode(value if isinstance(value, bytes) else b"").decode()
    if kind == "bool":
        return bool(value)
    if kind == "int":
        number = int(value) if isinstance(value, int) else 0
        return number - (1 << 64) if number >= 1 << 63 else number
    if kind == "quantity":  # resource.Quantity: {string: 1}
        return _scalar("str", dict(_fields(value if isinstance(value, bytes) else b"")).get(1, b""))
    if kind == "ios":  # intstr.IntOrString: {type: 1, intVal: 2, strVal: 3}
        fields = dict(_fields(value if isinstance(value, bytes) else b""))
        if fields.get(1) == 1:
            return _scalar("str", fields.get(3, b""))
        return _scalar("int", fields.get(2, 0))
    if isinstance(kind, dict):
        decoded = decode_message(value if isinstance(value, bytes) else b"", kind)
        if kind is TIME:
            return datetime.fromtimestamp(decoded.get("seconds", 0), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return decoded
    raise ValueError(f"unknown field kind {kind!r}")


def _empty(name: str, value: Any) -> bool:
    return value in ("", 0, False, {}) and not (name in KEEP_ZERO and value in (0, False))


def decode_message(buf: bytes, schema: Schema) -> dict[str, Any]:
    """A message as its JSON form; zero scalars and empty messages are left out (see KEEP_ZERO)."""
    out: dict[str, Any] = {}
    for number, value in _fields(buf):
        if number not in schema:
            continue
        name, kind = schema[number]
        if isinstance(kind, tuple) and kind[0] == "repeated":
            out.setdefault(name, []).append(_scalar(kind[1], value))
        elif isinstance(kind, tuple) and kind[0] == "map":
            entry = dict(_fields(value if isinstance(value, bytes) else b""))
            out.setdefault(name, {})[_scalar("str", entry.get(1, b""))] = _scalar(kind[1], entry.get(2, b""))
        elif isinstance(kind, tuple) and kind[0] == "inline":
            out.update(_scalar(kind[1], value))
        else:
            decoded = _scalar(kind, value)
            if kind is TIME and decoded.startswith("1970-01-01T00:00:00"):
                continue
            if not _empty(name, decoded):
                out[name] = decoded
    return out


def decode(raw: bytes) -> dict[str, Any]:
    """The JSON-shaped object a protobuf body carries (415 for types the sandbox cannot decode)."""
    if not raw.startswith(MAGIC):
        raise errors.bad_request("protobuf body without the Kubernetes envelope")
    try:
        envelope = dict(_fields(raw[len(MAGIC) :]))
        type_meta = decode_message(
            bytes(envelope.get(1, b"")), {1: ("apiVersion", "str"), 2: ("kind", "str")}
        )
        kind = type_meta.get("kind", "")
        schema = KINDS.get(kind)
        if schema is None:
            raise errors.unsupported_media(f"{PROTOBUF} ({kind or 'unknown kind'}: send JSON)")
        obj = decode_message(bytes(envelope.get(2, b"")), schema)
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"error decoding protobuf body: {exc}") from exc
    return {**type_meta, **obj}
