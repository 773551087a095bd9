"""InitializeMachine's outcome (pure): skipped on Unimplemented, else MCM's failure status and retry;
and the local provider's ``failInitializes`` that stages such failures."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mcm_tasks.api import MachineClass
from mcm_tasks.controllers.machine.create_io import (
    InitializeFailure,
    create_error_retry,
    initialize_failure,
)
from mcm_tasks.settings import Settings
from providers import Code, MachineError
from providers.local.spec import parse_class
from tests.unit.machine_support import NOW, machine


def test_unimplemented_means_no_initialization_needed(settings: Settings) -> None:
    err = MachineError(Code.Unimplemented, "the local provider needs no initialization")
    assert initialize_failure(machine(), err, NOW, settings) is None
    # even past the creation timeout: Unimplemented is not a failure at all
    assert initialize_failure(machine(timedelta(hours=1)), err, NOW, settings) is None


@pytest.mark.parametrize(
    "code",
    [
        Code.Uninitialized,
        Code.Internal,
        Code.Unknown,
        Code.Unavailable,
        Code.DeadlineExceeded,
        Code.ResourceExhausted,
        Code.NotFound,
        Code.InvalidArgument,
        Code.Aborted,
        Code.Canceled,
    ],
)
def test_any_other_code_is_a_failure_retried_after_short_retry(code: Code, settings: Settings) -> None:
    err = MachineError(code, "boom")
    assert initialize_failure(machine(), err, NOW, settings) == InitializeFailure(
        description=f"Provider error: machine codes error: code = [{code.name}] message = [boom]. "
        "Initialize VM Instance",
        phase="CrashLoopBackOff",
        error_code=code,
        retry=5.0,
    )


@pytest.mark.parametrize(
    ("code", "create_retry"),
    [(Code.ResourceExhausted, 600.0), (Code.Internal, 180.0), (Code.Uninitialized, 180.0)],
)
def test_initialize_retry_ignores_the_code_unlike_a_create_error(
    code: Code, create_retry: float, settings: Settings
) -> None:
    """A failed create waits by code (ResourceExhausted 10m, others 3m); a failed initialize always
    comes back after ShortRetry, as upstream: the VM exists, only its set-up is missing."""
    failure = initialize_failure(machine(), MachineError(code, "x"), NOW, settings)
    assert failure is not None and failure.retry == 5.0
    assert create_error_retry(code, settings) == create_retry


def test_a_driver_bug_counts_as_internal(settings: Settings) -> None:
    failure = initialize_failure(machine(), RuntimeError("driver bug"), NOW, settings)
    assert failure == InitializeFailure(
        description="Provider error: driver bug. Initialize VM Instance",
        phase="CrashLoopBackOff",
        error_code=Code.Internal,
        retry=5.0,
    )


@pytest.mark.parametrize(
    ("age", "spec", "phase"),
    [
        (timedelta(minutes=1), {}, "CrashLoopBackOff"),
        (timedelta(minutes=19), {}, "CrashLoopBackOff"),
        (timedelta(minutes=21), {}, "Failed"),
        (timedelta(minutes=4), {"creationTimeout": "5m"}, "CrashLoopBackOff"),
        (timedelta(minutes=6), {"creationTimeout": "5m"}, "Failed"),
    ],
)
def test_failure_phase_follows_the_creation_timeout(
    age: timedelta, spec: dict[str, object], phase: str, settings: Settings
) -> None:
    failure = initialize_failure(machine(age, **spec), MachineError(Code.Uninitialized), NOW, settings)
    assert failure is not None
    assert failure.phase == phase
    assert (failure.error_code, failure.retry) == (Code.Uninitialized, 5.0)


# --- the local provider's failInitializes (how the integration tests stage the failures) ----------------


def _local_class(spec: dict[str, object]) -> MachineClass:
    return MachineClass.model_validate(
        {"metadata": {"name": "small", "namespace": "ns"}, "provider": "local", "providerSpec": spec}
    )


@pytest.mark.parametrize(
    ("given", "count", "code"),
    [
        ({"count": 2}, 2, Code.Uninitialized),
        ({"count": 1, "code": "Internal"}, 1, Code.Internal),
        ({"count": 0, "code": 13}, 0, Code.Internal),
    ],
)
def test_fail_initializes_is_parsed_with_uninitialized_as_the_default_code(
    given: dict[str, object], count: int, code: Code
) -> None:
    spec = parse_class(_local_class({"failInitializes": given}))
    assert spec.fail_initializes is not None
    assert (spec.fail_initializes.count, spec.fail_initializes.code) == (count, code)
    assert parse_class(_local_class({})).fail_initializes is None


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ({"count": -1}, "providerSpec.failInitializes.count"),
        ({"count": 1, "code": "OK"}, "OK is not a failure code"),
        ({"count": 1, "code": "Boom"}, "unknown machine error code 'Boom'"),
        ({"count": 1, "extra": True}, "providerSpec.failInitializes.extra"),
    ],
)
def test_a_bad_fail_initializes_is_an_invalid_argument(given: dict[str, object], needle: str) -> None:
    with pytest.raises(MachineError) as info:
        parse_class(_local_class({"failInitializes": given}))
    assert info.value.code is Code.InvalidArgument
    assert needle in info.value.message
