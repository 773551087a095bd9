"""Credentials and userData from the merged machine secret, without ever exposing them.

Two ways to authenticate, as upstream: static keys under either spelling
(``providerAccessKeyId``/``accessKeyID`` and ``providerSecretAccessKey``/``secretAccessKey``), or
web identity, where ``workloadIdentityTokenFile`` names a file holding a projected token that STS
``AssumeRoleWithWebIdentity`` exchanges for ``roleARN``'s credentials. The mere presence of the
token-file key selects web identity. ``userData`` is required in both cases.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field

from providers.driver import Secret

ACCESS_KEY_ID_KEYS = ("providerAccessKeyId", "accessKeyID")
SECRET_ACCESS_KEY_KEYS = ("providerSecretAccessKey", "secretAccessKey")
TOKEN_FILE_KEY = "workloadIdentityTokenFile"
ROLE_ARN_KEY = "roleARN"
USER_DATA_KEY = "userData"


@dataclass(frozen=True)
class AWSCredentials:
    """Either static keys or a web-identity role; ``repr`` shows the kind and nothing else."""

    access_key_id: str = field(default="", repr=False)
    secret_access_key: str = field(default="", repr=False)
    token_file: str = field(default="", repr=False)
    role_arn: str = field(default="", repr=False)

    @property
    def web_identity(self) -> bool:
        return bool(self.token_file)

    def fingerprint(self) -> str:
        """Identifies the credentials in cache keys without keeping them readable there."""
        material = "\0".join((self.access_key_id, self.secret_access_key, self.token_file, self.role_arn))
        return hashlib.sha256(material.encode()).hexdigest()[:32]

    def sensitive_values(self) -> tuple[str, ...]:
        return tuple(v for v in (self.access_key_id, self.secret_access_key) if v)

    def __repr__(self) -> str:
        return f"AWSCredentials({'web-identity' if self.web_identity else 'static'})"

    __str__ = __repr__


def _first(secret: Secret, keys: tuple[str, ...]) -> str:
    """The first key present wins (even if blank), trimmed, as the Go provider reads them."""
    for key in keys:
        if key in secret.data:
            return secret.get_str(key).strip()
    return ""


def _non_blank(secret: Secret, keys: tuple[str, ...]) -> bool:
    return any(secret.get_str(key) != "" for key in keys)


def validate_secret(secret: Secret | None) -> list[str]:
    """Missing keys, by name; a value is never part of a message."""
    if secret is None:
        return ["secretRef: the secret is required"]
    problems = []
    if TOKEN_FILE_KEY in secret.data:
        if not secret.data[TOKEN_FILE_KEY]:
            problems.append(f"secretRef.{TOKEN_FILE_KEY}: the workload identity token file is required")
        if not secret.data.get(ROLE_ARN_KEY):
            problems.append(f"secretRef.{ROLE_ARN_KEY}: required when workload identity is used")
    else:
        if not _non_blank(secret, ACCESS_KEY_ID_KEYS):
            problems.append(f"secretRef: one of {' or '.join(ACCESS_KEY_ID_KEYS)} is required")
        if not _non_blank(secret, SECRET_ACCESS_KEY_KEYS):
            problems.append(f"secretRef: one of {' or '.join(SECRET_ACCESS_KEY_KEYS)} is required")
    if not secret.data.get(USER_DATA_KEY):
        problems.append(f"secretRef.{USER_DATA_KEY}: userData is required")
    return problems


def credentials_from(secret: Secret) -> AWSCredentials:
    if TOKEN_FILE_KEY in secret.data:
        return AWSCredentials(
            token_file=secret.get_str(TOKEN_FILE_KEY).strip(),
            role_arn=secret.get_str(ROLE_ARN_KEY).strip(),
        )
    return AWSCredentials(
        access_key_id=_first(secret, ACCESS_KEY_ID_KEYS),
        secret_access_key=_first(secret, SECRET_ACCESS_KEY_KEYS),
    )


def user_data(secret: Secret) -> bytes:
    return secret.data.get(USER_DATA_KEY, b"")


def sensitive_values(secret: Secret) -> tuple[str, ...]:
    """Every secret string that must be scrubbed from a message before it leaves the driver."""
    values = list(credentials_from(secret).sensitive_values())
    data = user_data(secret)
    if data:
        values.append(data.decode(errors="replace"))
        values.append(base64.b64encode(data).decode())
    return tuple(v for v in values if len(v) >= 4)
