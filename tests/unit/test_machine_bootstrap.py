"""Bootstrap token and userData placeholders (pure parts)."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime

from mcm_tasks.controllers.machine.bootstrap_io import (
    needs_token,
    new_token_secret,
    substitute,
    token_id,
    token_secret_body,
    token_secret_name,
)


def test_token_id_is_stable_and_well_formed() -> None:
    assert token_id("machine-a") == token_id("machine-a")
    assert token_id("machine-a") != token_id("machine-b")
    assert re.fullmatch(r"[0-9a-z]{6}", token_id("machine-a"))
    assert token_secret_name("machine-a") == "bootstrap-token-" + token_id("machine-a")


def test_token_secret_part() -> None:
    part = new_token_secret()
    assert re.fullmatch(r"[0-9a-z]{16}", part)
    assert part != new_token_secret()


def test_substitute_plain_and_url_encoded_placeholders() -> None:
    data = b"name=<<MACHINE_NAME>> token=<<BOOTSTRAP_TOKEN>> url=https://x/?t=%3C%3CBOOTSTRAP_TOKEN%3E%3E&m=%3C%3CMACHINE_NAME%3E%3E"
    out = substitute(data, "m1", "abcdef.0123456789abcdef")
    assert out == b"name=m1 token=abcdef.0123456789abcdef url=https://x/?t=abcdef.0123456789abcdef&m=m1"


def test_without_token_only_the_machine_name_is_substituted() -> None:
    assert substitute(b"<<MACHINE_NAME>> <<BOOTSTRAP_TOKEN>>", "m1", None) == b"m1 <<BOOTSTRAP_TOKEN>>"


def test_binary_user_data_survives() -> None:
    data = b"\xff\xfe<<MACHINE_NAME>>\x00"
    assert substitute(data, "m1", None) == b"\xff\xfem1\x00"


def test_needs_token() -> None:
    assert needs_token(b"#!/bin/sh\nkubeadm join --token <<BOOTSTRAP_TOKEN>>")
    assert needs_token(b"t=%3C%3CBOOTSTRAP_TOKEN%3E%3E")
    assert not needs_token(b"#!/bin/sh\necho <<MACHINE_NAME>>")


def test_token_secret_body() -> None:
    body = token_secret_body(
        "m1", "0123456789abcdef", datetime(2026, 1, 1, tzinfo=UTC), "system:bootstrappers:x"
    )
    assert body["type"] == "bootstrap.kubernetes.io/token"
    assert body["metadata"] == {"name": token_secret_name("m1"), "namespace": "kube-system"}
    data = {k: base64.b64decode(v).decode() for k, v in body["data"].items()}
    assert data["token-id"] == token_id("m1")
    assert data["token-secret"] == "0123456789abcdef"
    assert data["expiration"] == "2026-01-01T00:00:00Z"
    assert data["usage-bootstrap-authentication"] == data["usage-bootstrap-signing"] == "true"
    assert data["auth-extra-groups"] == "system:bootstrappers:x"
    assert (
        "auth-extra-groups"
        not in token_secret_body("m1", "x" * 16, datetime(2026, 1, 1, tzinfo=UTC), "")["data"]
    )
