"""API errors are told apart by Status reason first, code second, as apimachinery does."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from mcm_tasks.kube import errors


def api_error(code: int, reason: str | None, message: str = "m") -> ApiException:
    err = ApiException(status=code, reason="x")
    if reason is not None:
        err.body = json.dumps(
            {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code,
             "message": message}
        )  # fmt: skip
    return err


@pytest.mark.parametrize(
    ("err", "check", "expected"),
    [
        (api_error(404, "NotFound"), errors.is_not_found, True),
        (api_error(404, None), errors.is_not_found, True),
        (api_error(409, "Conflict"), errors.is_conflict, True),
        (api_error(409, "AlreadyExists"), errors.is_conflict, False),
        (api_error(409, "AlreadyExists"), errors.is_already_exists, True),
        (api_error(409, "Conflict"), errors.is_already_exists, False),
        # a bare 409 is a conflict, never "already exists"
        (api_error(409, None), errors.is_conflict, True),
        (api_error(409, None), errors.is_already_exists, False),
        (api_error(422, "Invalid"), errors.is_invalid, True),
        (api_error(410, "Expired"), errors.is_gone, True),
        (api_error(410, None), errors.is_gone, True),
        (api_error(429, "TooManyRequests"), errors.is_too_many_requests, True),
        (api_error(403, "Forbidden"), errors.is_forbidden, True),
        (api_error(504, "Timeout"), errors.is_timeout, True),
        (api_error(500, "InternalError"), errors.is_not_found, False),
        (ValueError("404"), errors.is_not_found, False),
        (ValueError("409"), errors.is_conflict, False),
    ],
)
def test_classification(err: BaseException, check: object, expected: bool) -> None:
    assert check(err) is expected  # type: ignore[operator]


def test_non_status_body_falls_back_to_code() -> None:
    err = ApiException(status=404, reason="Not Found")
    err.body = "<html>not json</html>"
    assert errors.is_not_found(err)
    assert errors.status_of(err) == {}


def test_describe_uses_status_message_not_body() -> None:
    err = api_error(409, "Conflict", "the object has been modified")
    assert errors.describe(err) == "409 Conflict: the object has been modified"
    assert errors.describe(KeyError("k")) == "KeyError: 'k'"
