"""Decode the Kubernetes protobuf request bodies kubectl's typed clients send.

``kubectl create namespace|configmap|secret`` and ``kubectl drain`` (evictions) encode their bodies
as ``application/vnd.kubernetes.protobuf`` and do not retry as JSON, so the sandbox decodes those
few types; anything else gets 415. Responses are always JSON, which these clients also accept.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from mcm_sandbox.apiserver import errors

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# A schema maps field number -> (json name, kind); kind is a scalar tag, a nested schema, or a tuple
# ("repeated", kind) / ("map", value kind).
Schema = dict[int, tuple[str, Any]]

TIME: Schema = {1: ("seconds", "int"), 2: ("nanos", "int")}
OWNER_REF: Schema = {1: ("kind", "str"), 3: ("name", "str"), 4: ("uid", "str"), 5: ("apiVersion", "str"),
                     6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")}  # fmt: skip
OBJECT_META: Schema = {
    1: ("name", "str"), 2: ("generateName", "str"), 3: ("namespace", "str"), 5: ("uid", "str"),
    6: ("resourceVersion", "str"), 7: ("generation", "int"), 8: ("creationTimestamp", TIME),
    9: ("deletionTimestamp", TIME), 10: ("deletionGracePeriodSeconds", "int"), 11: ("labels", ("map", "str")),
    12: ("annotations", ("map", "str")), 13: ("ownerReferences", ("repeated", OWNER_REF)),
    14: ("finalizers", ("repeated", "str")),
}  # fmt: skip
DELETE_OPTIONS: Schema = {
    1: ("gracePeriodSeconds", "int"),
    2: ("preconditions", {1: ("uid", "str"), 2: ("resourceVersion", "str")}),
    3: ("orphanDependents", "bool"), 4: ("propagationPolicy", "str"), 5: ("dryRun", ("repeated", "str")),
}  # fmt: skip
KINDS: dict[str, Schema] = {
    "Namespace": {1: ("metadata", OBJECT_META), 2: ("spec", {1: ("finalizers", ("repeated", "str"))}),
                  3: ("status", {1: ("phase", "str")})},
    "ConfigMap": {1: ("metadata", OBJECT_META), 2: ("data", ("map", "str")),
                  3: ("binaryData", ("map", "bytes")), 4: ("immutable", "bool")},
    "Secret": {1: ("metadata", OBJECT_META), 2: ("data", ("map", "bytes")), 3: ("type", "str"),
               4: ("stringData", ("map", "str")), 5: ("immutable", "bool")},
    "Eviction": {1: ("metadata", OBJECT_META), 2: ("deleteOptions", DELETE_OPTIONS)},
    "DeleteOptions": DELETE_OPTIONS,
}  # fmt: skip


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
    if isinstance(kind, dict):
        decoded = decode_message(value if isinstance(value, bytes) else b"", kind)
        if kind is TIME:
            return datetime.fromtimestamp(decoded.get("seconds", 0), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return decoded
    raise ValueError(f"unknown field kind {kind!r}")


def decode_message(buf: bytes, schema: Schema) -> dict[str, Any]:
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
        else:
            out[name] = _scalar(kind, value)
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
