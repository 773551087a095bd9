"""Machine error codes and the typed error every driver raises.

Upstream MCM passes errors between driver and controller as strings of the form
``machine codes error: code = [Name] message = [msg]`` and parses them back; the seeds call
that a design defect. Here a driver raises :class:`MachineError` and the controller reads
``err.code`` directly.
"""

from __future__ import annotations

from enum import IntEnum


class Code(IntEnum):
    """The 18 status codes of MCM's driver contract (gRPC numbering plus Uninitialized)."""

    OK = 0
    Canceled = 1
    Unknown = 2
    InvalidArgument = 3
    DeadlineExceeded = 4
    NotFound = 5
    AlreadyExists = 6
    PermissionDenied = 7
    ResourceExhausted = 8
    FailedPrecondition = 9
    Aborted = 10
    OutOfRange = 11
    Unimplemented = 12
    Internal = 13
    Unavailable = 14
    DataLoss = 15
    Unauthenticated = 16
    Uninitialized = 17


#: Codes that mean "the cloud did not answer in time, try again soon" (ShortRetry upstream).
TRANSIENT_CODES = frozenset({Code.Unknown, Code.DeadlineExceeded, Code.Aborted, Code.Unavailable})


class MachineError(Exception):
    """A driver failure with a machine code; the message must never contain secrets."""

    def __init__(self, code: Code, message: str = "") -> None:
        super().__init__(message)
        self.code = Code(code)
        self.message = message

    def __str__(self) -> str:
        return f"machine codes error: code = [{self.code.name}] message = [{self.message}]"

    def __repr__(self) -> str:
        return f"MachineError({self.code.name}, {self.message!r})"


def code_of(err: BaseException) -> Code:
    """The code of any exception: a MachineError's own, anything else is Internal."""
    return err.code if isinstance(err, MachineError) else Code.Internal
