"""Read a whole Redis keyspace as text, every key type included, to search it for values that must
never be there (secret data): strings, hashes, lists, sets, sorted sets and streams, with kombu's
task messages opened (their bodies are base64 inside a JSON envelope) and JSON nested in JSON.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis


@dataclass(frozen=True)
class Found:
    key: str
    type: str
    excerpt: str


def _texts(value: bytes) -> Iterator[str]:
    """The value as text, and the text of whatever base64 task bodies and JSON it carries."""
    text = value.decode("utf-8", errors="replace")
    yield text
    try:
        parsed = json.loads(text)
    except ValueError:
        return
    yield from _nested(parsed)


def _nested(obj: Any) -> Iterator[str]:
    if isinstance(obj, dict):
        body = obj.get("body")
        if isinstance(body, str):
            decoded = b""
            with contextlib.suppress(binascii.Error, ValueError):
                decoded = base64.b64decode(body, validate=True)
            if decoded:
                yield from _texts(decoded)
        for v in obj.values():
            yield from _nested(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _nested(v)
    elif isinstance(obj, str) and obj[:1] in "{[":
        parsed: Any = None
        with contextlib.suppress(ValueError):
            parsed = json.loads(obj)
        if parsed is not None:
            yield from _nested(parsed)


def key_values(client: redis.Redis, key: bytes) -> tuple[str, list[bytes]]:
    """(type, every member, field and value) of one key, as bytes (a client without decoding)."""
    raw: Any = client.type(key)
    kind = raw.decode() if isinstance(raw, bytes) else str(raw)
    out: list[Any] = [key]
    if kind == "string":
        out.append(client.get(key) or b"")
    elif kind == "hash":
        for k, v in dict(client.hgetall(key)).items():
            out += [k, v]
    elif kind == "list":
        out += list(client.lrange(key, 0, -1))
    elif kind == "set":
        out += list(client.smembers(key))
    elif kind == "zset":
        out += list(client.zrange(key, 0, -1))
    elif kind == "stream":
        entries: Any = client.xrange(key)
        for _, fields in entries:
            for k, v in fields.items():
                out += [k, v]
    return kind, [v if isinstance(v, bytes) else str(v).encode() for v in out]


def needle_forms(needle: str) -> list[str]:
    """The needle and its base64 forms at each of the three alignments it can have inside a longer
    encoded value (the characters that depend on its neighbours left out)."""
    raw = needle.encode()
    forms = [needle]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw).decode()
        forms.append(encoded[4 if pad else 0 : -4])
    return [f for f in forms if len(f) >= 8]


def search(client: redis.Redis, needles: list[str]) -> tuple[int, list[Found]]:
    """(keys scanned, where any form of any needle was found)."""
    forms = [(needle, form) for needle in needles for form in needle_forms(needle)]
    found: list[Found] = []
    scanned = 0
    for key in client.scan_iter(count=1000):
        scanned += 1
        kind, values = key_values(client, key)
        for value in values:
            for text in _texts(value):
                for _needle, form in forms:
                    at = text.find(form)
                    if at >= 0:
                        excerpt = text[max(0, at - 40) : at + len(form) + 40]
                        found.append(Found(key.decode(errors="replace"), kind, excerpt))
    return scanned, found
