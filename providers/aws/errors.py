"""EC2 error codes to machine codes, and messages that cannot carry a secret.

The machine controller reacts to the code: ``ResourceExhausted`` makes it try elsewhere or later
without counting a broken VM, ``NotFound`` means the VM is gone, anything else is ``Internal``.
"""

from __future__ import annotations

from collections.abc import Iterable

from botocore.exceptions import BotoCoreError, ClientError

from providers.errors import Code, MachineError

#: EC2 answers that mean "no capacity or quota right now", not "the request is wrong"
RESOURCE_EXHAUSTED = frozenset(
    {
        "InsufficientCapacity",
        "InsufficientAddressCapacity",
        "InsufficientInstanceCapacity",
        "InsufficientVolumeCapacity",
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "VolumeLimitExceeded",
        "MaxIOPSLimitExceeded",
        "RouteLimitExceeded",
        "Unsupported",
    }
)
INSTANCE_NOT_FOUND = "InvalidInstanceID.NotFound"
IMAGE_NOT_FOUND = "InvalidAMIID.NotFound"


def aws_error_code(err: BaseException) -> str:
    if isinstance(err, ClientError):
        return str(err.response.get("Error", {}).get("Code", ""))
    return ""


def code_for_create(err: BaseException) -> Code:
    """RunInstances and the calls before it."""
    if isinstance(err, MachineError):
        return err.code
    return Code.ResourceExhausted if aws_error_code(err) in RESOURCE_EXHAUSTED else Code.Internal


def code_for_terminate(err: BaseException) -> Code:
    if isinstance(err, MachineError):
        return err.code
    return Code.NotFound if aws_error_code(err) == INSTANCE_NOT_FOUND else Code.Internal


def code_for_image_lookup(err: BaseException) -> Code:
    """A missing AMI is NotFound whether EC2 says so by error or by an empty answer."""
    if aws_error_code(err) == IMAGE_NOT_FOUND:
        return Code.NotFound
    return code_for_create(err)


def is_instance_not_found(err: BaseException) -> bool:
    return aws_error_code(err) == INSTANCE_NOT_FOUND


def scrub(message: str, secrets: Iterable[str]) -> str:
    for value in sorted(set(secrets), key=len, reverse=True):
        if value:
            message = message.replace(value, "<redacted>")
    return message


def describe(err: BaseException) -> str:
    """EC2's own code and message; for SDK errors the exception text."""
    if isinstance(err, ClientError):
        info = err.response.get("Error", {})
        return f"{info.get('Code', 'Error')}: {info.get('Message', '')}".strip()
    if isinstance(err, BotoCoreError | MachineError):
        return err.message if isinstance(err, MachineError) else str(err)
    return f"{type(err).__name__}: {err}"


def to_machine_error(code: Code, context: str, err: BaseException, secrets: Iterable[str]) -> MachineError:
    """A MachineError passes through unchanged (its code was decided where it was raised)."""
    if isinstance(err, MachineError):
        return err
    return MachineError(code, scrub(f"{context}: {describe(err)}", secrets))
