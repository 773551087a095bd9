"""MCM's ``mcm_cloud_api_*`` Prometheus metrics, shared by every provider.

Names and labels follow MCM's provider metrics so existing dashboards keep working: one pair of
series for each call to the cloud's API (``service`` = the cloud operation) and one pair for each
driver method (``operation`` = ``create_machine``, ``list_machine``, …). Label values are names
and codes only, never anything taken from a secret.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Histogram

from providers.errors import Code, code_of

NAMESPACE = "mcm"
SUBSYSTEM = "cloud_api"

API_REQUESTS = Counter(
    "requests_total",
    "Number of successful cloud API requests, by provider and service.",
    ["provider", "service"],
    namespace=NAMESPACE,
    subsystem=SUBSYSTEM,
)
API_REQUESTS_FAILED = Counter(
    "requests_failed_total",
    "Number of failed cloud API requests, by provider and service.",
    ["provider", "service"],
    namespace=NAMESPACE,
    subsystem=SUBSYSTEM,
)
API_REQUEST_DURATION = Histogram(
    "api_request_duration_seconds",
    "Duration of successful cloud API requests, by provider and service.",
    ["provider", "service"],
    namespace=NAMESPACE,
    subsystem=SUBSYSTEM,
)
DRIVER_REQUEST_DURATION = Histogram(
    "driver_request_duration_seconds",
    "Duration of successful driver method calls, by provider and operation.",
    ["provider", "operation"],
    namespace=NAMESPACE,
    subsystem=SUBSYSTEM,
)
DRIVER_REQUESTS_FAILED = Counter(
    "driver_requests_failed_total",
    "Number of failed driver method calls, by provider, operation and machine error code.",
    ["provider", "operation", "error_code"],
    namespace=NAMESPACE,
    subsystem=SUBSYSTEM,
)


def record_api_call(provider: str, service: str, seconds: float, ok: bool) -> None:
    """Like MCM, a failed call only counts; its duration would mix timeouts into the latencies."""
    if ok:
        API_REQUESTS.labels(provider, service).inc()
        API_REQUEST_DURATION.labels(provider, service).observe(seconds)
    else:
        API_REQUESTS_FAILED.labels(provider, service).inc()


#: driver methods for which NotFound is an answer, not a failure: the VM is already gone (delete),
#: or does not exist yet (status: the controller creates it)
NOT_FOUND_ANSWERS = frozenset({"delete_machine", "get_machine_status"})


def failure_code(operation: str, err: BaseException) -> str | None:
    """The ``error_code`` label of a failed call (the code's name: ``ResourceExhausted``), or None
    when the error is the method's normal answer."""
    code = code_of(err)
    if code is Code.NotFound and operation in NOT_FOUND_ANSWERS:
        return None
    return code.name


@contextmanager
def driver_operation(provider: str, operation: str) -> Iterator[None]:
    """Time a driver method; a failure is counted under its machine code's name."""
    started = time.perf_counter()
    try:
        yield
    except BaseException as err:
        code = failure_code(operation, err)
        if code is not None:
            DRIVER_REQUESTS_FAILED.labels(provider, operation, code).inc()
        raise
    DRIVER_REQUEST_DURATION.labels(provider, operation).observe(time.perf_counter() - started)
