"""Classify API errors the way apimachinery's ``errors.IsXxx`` helpers do.

The official client raises ``ApiException`` with the HTTP code and the ``metav1.Status`` body as
text. Two errors share 409 (``Conflict`` on a stale resourceVersion, ``AlreadyExists`` on a create),
so, like client-go, the Status ``reason`` decides and the code is only a fallback when the server
sent no reason.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException

# metav1.StatusReason values
NOT_FOUND = "NotFound"
ALREADY_EXISTS = "AlreadyExists"
CONFLICT = "Conflict"
INVALID = "Invalid"
GONE = "Gone"
EXPIRED = "Expired"
TOO_MANY_REQUESTS = "TooManyRequests"
FORBIDDEN = "Forbidden"
SERVER_TIMEOUT = "ServerTimeout"
TIMEOUT = "Timeout"

#: the code each reason implies when a server sends only the code
_CODE_OF_REASON = {
    NOT_FOUND: 404,
    CONFLICT: 409,
    INVALID: 422,
    GONE: 410,
    TOO_MANY_REQUESTS: 429,
    FORBIDDEN: 403,
    SERVER_TIMEOUT: 500,
    TIMEOUT: 504,
}


def status_of(err: BaseException) -> dict[str, Any]:
    """The ``metav1.Status`` an API error carries, or ``{}`` (not an API error, or no JSON body)."""
    if not isinstance(err, ApiException) or not err.body:
        return {}
    body = err.body.decode() if isinstance(err.body, bytes) else err.body
    try:
        status = json.loads(body)
    except (TypeError, ValueError):
        return {}
    return status if isinstance(status, dict) and status.get("kind") == "Status" else {}


def reason_of(err: BaseException) -> str:
    """The Status reason, "" when unknown."""
    return str(status_of(err).get("reason") or "")


def code_of(err: BaseException) -> int:
    if not isinstance(err, ApiException):
        return 0
    try:
        return int(err.status or status_of(err).get("code") or 0)
    except (TypeError, ValueError):
        return 0


def _is(err: BaseException, reason: str) -> bool:
    if not isinstance(err, ApiException):
        return False
    found = reason_of(err)
    if found:
        return found == reason
    return code_of(err) == _CODE_OF_REASON.get(reason, -1)


def is_not_found(err: BaseException) -> bool:
    return _is(err, NOT_FOUND)


def is_already_exists(err: BaseException) -> bool:
    """Only by reason: a bare 409 is a conflict, as in client-go."""
    return isinstance(err, ApiException) and reason_of(err) == ALREADY_EXISTS


def is_conflict(err: BaseException) -> bool:
    return _is(err, CONFLICT)


def is_invalid(err: BaseException) -> bool:
    return _is(err, INVALID)


def is_gone(err: BaseException) -> bool:
    """A watch or list from a resourceVersion the server no longer has: re-list."""
    return _is(err, GONE) or (isinstance(err, ApiException) and reason_of(err) == EXPIRED)


def is_too_many_requests(err: BaseException) -> bool:
    """429: also what an eviction blocked by a PodDisruptionBudget answers."""
    return _is(err, TOO_MANY_REQUESTS)


def is_forbidden(err: BaseException) -> bool:
    return _is(err, FORBIDDEN)


def is_timeout(err: BaseException) -> bool:
    return _is(err, SERVER_TIMEOUT) or _is(err, TIMEOUT)


def describe(err: BaseException) -> str:
    """A one-line summary for logs and conditions (the Status message, never the whole body)."""
    if not isinstance(err, ApiException):
        return f"{type(err).__name__}: {err}"
    status = status_of(err)
    message = status.get("message") or err.reason or ""
    return f"{code_of(err)} {status.get('reason') or ''}: {message}".strip()
