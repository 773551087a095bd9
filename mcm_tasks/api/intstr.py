"""``intstr.IntOrString`` arithmetic: how maxSurge / maxUnavailable become machine counts."""

from __future__ import annotations

import re

_INTEGER = re.compile(r"[+-]?[0-9]+")

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def resolve_int_or_percent(value: int | str | None, total: int, round_up: bool) -> int:
    """An absolute number as is; ``"N%"`` of ``total``, rounded up or down. ValueError otherwise.

    As Kubernetes does it: a string must end in ``%`` with an integer before it (``"5"`` and
    ``"12.5%"`` are errors), and a missing value is an error, not zero.
    """
    if value is None:
        raise ValueError("nil value for IntOrString")
    if isinstance(value, bool):
        raise ValueError(f"invalid value for IntOrString: {value!r}")
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise ValueError(f"invalid value for IntOrString: {value!r} is not a percentage")
    if not _INTEGER.fullmatch(value[:-1]):
        raise ValueError(f"invalid value for IntOrString: {value!r} is not an integer percentage")
    scaled = int(value[:-1]) * total
    return -(-scaled // 100) if round_up else scaled // 100
