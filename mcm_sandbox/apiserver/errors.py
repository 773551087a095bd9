"""API errors as ``metav1.Status`` objects.

Clients branch on ``reason`` and ``code`` (``ApiException.status``, ``errors.IsConflict`` …), so each
helper here yields exactly the reason/code pair and message shape a real API server sends.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """Raised anywhere in request handling; the app turns it into a Status response."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        return failure_status(self.code, self.message, self.reason, self.details)


def failure_status(
    code: int, message: str, reason: str = "", details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A failure Status in metav1.Status's field order (kind, apiVersion, metadata, status, message,
    reason, details, code), as kube-apiserver's JSON serializer writes it; an empty reason and absent
    details are left out (``omitempty``). Every error body of the sandbox is one of these."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def details_of(name: str, group: str, resource: str, **extra: Any) -> dict[str, Any]:
    """StatusDetails in field order (name, group, kind, uid, causes), empty fields omitted."""
    details: dict[str, Any] = {"name": name} if name else {}
    if group:
        details["group"] = group
    details["kind"] = resource
    details.update(extra)
    return details


def qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{qualified(resource, group)} "{name}" not found', details_of(name, group, resource)
    )


def not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(resource, group)} "{name}" already exists',
        details_of(name, group, resource),
    )


def conflict(resource: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
        details_of(name, group, resource),
    )


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    summary = ", ".join(
        f"{c.get('field', '')}: {c.get('message', '')}" if c.get("field") else c.get("message", "")
        for c in causes
    )
    return ApiError(
        422,
        "Invalid",
        f'{qualified(kind, group)} "{name}" is invalid: {summary}',
        {"name": name, "group": group, "kind": kind, "causes": causes}
        if group
        else {"name": name, "kind": kind, "causes": causes},
    )


def cause(field: str, message: str, reason: str = "FieldValueInvalid") -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(resource: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f'{qualified(resource, group)} "{name}" is forbidden: {why}',
        details_of(name, group, resource),
    )


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message, {})


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_large() -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728")


def unsupported_media(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted "
        f"media types include: application/json-patch+json, application/merge-patch+json, "
        f'application/strategic-merge-patch+json; got "{content_type}"',
    )


def not_acceptable(accept: str) -> ApiError:
    return ApiError(
        406, "NotAcceptable", f"only the following media types are accepted: application/json; got {accept}"
    )


def not_acceptable_message(message: str) -> ApiError:
    """``errNotAcceptable`` of a conversion the object cannot take (a list as one object's metadata)."""
    return ApiError(406, "NotAcceptable", message)


def too_many_requests(
    message: str, causes: list[dict[str, str]] | None = None, retry_after: int = 0
) -> ApiError:
    details: dict[str, Any] = {"causes": causes} if causes else {}
    headers = {}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return ApiError(429, "TooManyRequests", message, details or None, headers)


def internal(message: str) -> ApiError:
    return ApiError(
        500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]}
    )


def unavailable(message: str = "the server is currently unable to handle the request") -> ApiError:
    return ApiError(503, "ServiceUnavailable", message, {"retryAfterSeconds": 1}, {"Retry-After": "1"})


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def success(details: dict[str, Any] | None = None, code: int = 200) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def rbac_forbidden(attrs: Any, reason: str) -> ApiError:
    """403 as kube-apiserver's authorization filter words it (``responsewriters.Forbidden``)."""
    from mcm_sandbox.apiserver.rbac import forbidden_message

    why = forbidden_message(attrs) + (f": {reason}" if reason else "")
    if not attrs.resource_request:
        return ApiError(403, "Forbidden", f"forbidden: {why}", {})
    prefix = qualified(attrs.resource, attrs.api_group)
    message = (
        f'{prefix} "{attrs.name}" is forbidden: {why}' if attrs.name else f"{prefix} is forbidden: {why}"
    )
    return ApiError(403, "Forbidden", message, details_of(attrs.name, attrs.api_group, attrs.resource))
