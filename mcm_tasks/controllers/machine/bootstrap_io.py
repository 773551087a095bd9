"""Bootstrap tokens and userData placeholders (upstream ``addBootstrapTokenToUserData``,
``addMachineNameToUserData``).

In target mode a machine's userData may carry ``<<BOOTSTRAP_TOKEN>>``: the controller creates a
bootstrap-token Secret in the target's ``kube-system`` (id derived from the machine name, random
secret part, valid for the creation timeout) and substitutes ``<id>.<secret>``; the Secret is deleted
when the machine first joins. ``<<MACHINE_NAME>>`` is always substituted. URL-encoded placeholders
(userData embedded in a URL) are replaced too.

Deliberate difference: upstream creates the token for every machine; here only when the userData
contains the placeholder, which saves two target writes per machine that does not use it.

The token and the userData are secrets: they go into the driver request only, never into logs,
events, status or task arguments.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import string
from datetime import datetime, timedelta
from typing import Any, Final
from urllib.parse import quote

from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.api import format_time
from mcm_tasks.api.constants import (
    BOOTSTRAP_TOKEN_NAMESPACE,
    BOOTSTRAP_TOKEN_PLACEHOLDER,
    BOOTSTRAP_TOKEN_SECRET_PREFIX,
    MACHINE_NAME_PLACEHOLDER,
    USER_DATA_SECRET_KEY,
)
from mcm_tasks.kube import ops
from providers.driver import Secret

TOKEN_TYPE: Final = "bootstrap.kubernetes.io/token"
_ALPHABET: Final = string.ascii_lowercase + string.digits
TOKEN_ID_LENGTH: Final = 6
TOKEN_SECRET_LENGTH: Final = 16


def token_id(machine_name: str) -> str:
    """Six characters of [0-9a-f] derived from the machine name, so every worker finds the same Secret."""
    return hashlib.sha256(machine_name.encode()).hexdigest()[:TOKEN_ID_LENGTH]


def token_secret_name(machine_name: str) -> str:
    return BOOTSTRAP_TOKEN_SECRET_PREFIX + token_id(machine_name)


def new_token_secret() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(TOKEN_SECRET_LENGTH))


def _forms(placeholder: str) -> tuple[str, ...]:
    return (placeholder, quote(placeholder, safe=""))


def needs_token(user_data: bytes) -> bool:
    text = user_data.decode(errors="replace")
    return any(form in text for form in _forms(BOOTSTRAP_TOKEN_PLACEHOLDER))


def substitute(user_data: bytes, machine_name: str, token: str | None) -> bytes:
    """userData with its placeholders filled in (the token one only when a token is given)."""
    text = user_data.decode(errors="surrogateescape")
    for form in _forms(MACHINE_NAME_PLACEHOLDER):
        text = text.replace(form, machine_name)
    if token is not None:
        for form in _forms(BOOTSTRAP_TOKEN_PLACEHOLDER):
            text = text.replace(form, token)
    return text.encode(errors="surrogateescape")


def token_secret_body(
    machine_name: str, secret_part: str, expires: datetime, extra_groups: str
) -> dict[str, Any]:
    values = {
        "token-id": token_id(machine_name),
        "token-secret": secret_part,
        "expiration": format_time(expires),
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",
        "description": f"bootstrap token for machine {machine_name}",
    }
    if extra_groups:
        values["auth-extra-groups"] = extra_groups
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": TOKEN_TYPE,
        "metadata": {"name": token_secret_name(machine_name), "namespace": BOOTSTRAP_TOKEN_NAMESPACE},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
    }


def _decoded(secret: dict[str, Any], key: str) -> str:
    raw = (secret.get("data") or {}).get(key)
    return base64.b64decode(raw).decode() if raw else ""


def ensure_token(
    api: ApiClient, machine_name: str, valid_for: float, extra_groups: str, now: datetime
) -> str:
    """``<id>.<secret>`` of the machine's bootstrap token, creating its Secret when absent or expired."""
    name = token_secret_name(machine_name)
    found = ops.get(api, kinds.SECRET.resource, name, BOOTSTRAP_TOKEN_NAMESPACE, missing_ok=True)
    if found is not None:
        expiration = _decoded(found, "expiration")
        part = _decoded(found, "token-secret")
        try:
            fresh = bool(part) and datetime.fromisoformat(expiration.replace("Z", "+00:00")) > now
        except ValueError:
            fresh = False
        if fresh:
            return f"{token_id(machine_name)}.{part}"
        ops.delete(api, kinds.SECRET.resource, name, BOOTSTRAP_TOKEN_NAMESPACE, missing_ok=True)
    part = new_token_secret()
    body = token_secret_body(machine_name, part, now + timedelta(seconds=valid_for), extra_groups)
    ops.create(api, kinds.SECRET.resource, body, BOOTSTRAP_TOKEN_NAMESPACE)
    return f"{token_id(machine_name)}.{part}"


def delete_token(api: ApiClient, machine_name: str) -> None:
    """Upstream: ``deleteBootstrapToken``."""
    ops.delete(
        api,
        kinds.SECRET.resource,
        token_secret_name(machine_name),
        BOOTSTRAP_TOKEN_NAMESPACE,
        missing_ok=True,
    )


def prepare_secret(
    secret: Secret,
    machine_name: str,
    token_api: ApiClient | None,
    valid_for: float,
    extra_groups: str,
    now: datetime,
) -> Secret | None:
    """A copy of the merged secret with userData's placeholders filled in; None when there is no
    userData (the caller reports it). ``token_api`` None = no target cluster, no token; ``now`` the
    pass's precise clock (``scope.precise_clock()``), against which a token's expiry is judged."""
    user_data = secret.data.get(USER_DATA_SECRET_KEY)
    if not user_data:
        return None
    token = None
    if token_api is not None and needs_token(user_data):
        token = ensure_token(token_api, machine_name, valid_for, extra_groups, now)
    data = dict(secret.data)
    data[USER_DATA_SECRET_KEY] = substitute(user_data, machine_name, token)
    return Secret(data=data)
