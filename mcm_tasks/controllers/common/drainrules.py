"""Whether a ``MachineDrainRule`` can be used: its problems in short sentences. Pure; shared by the
drain, which leaves invalid rules out, and the ``drain-rules`` safety job, which says so on each rule
(``drainrules_io``)."""

from __future__ import annotations

from typing import Final

from mcm_tasks.api.drainrule import DrainBehavior, MachineDrainRule
from mcm_tasks.api.validation import validate_label_selector

#: the order is an int32, as Cluster API's
ORDER_MIN: Final = -(2**31)
ORDER_MAX: Final = 2**31 - 1
#: at most this many problems are told about one rule
_PROBLEMS_SHOWN: Final = 5


def problems(rule: MachineDrainRule) -> list[str]:
    """Why a rule cannot be used, in short sentences (none: it is valid)."""
    out: list[str] = []
    drain = rule.spec.drain
    allowed = ", ".join(b.value for b in DrainBehavior)
    if drain.behavior not in {b.value for b in DrainBehavior}:
        out.append(f"spec.drain.behavior: {drain.behavior[:64]!r} is not one of {allowed}")
    if drain.order is not None:
        if not ORDER_MIN <= drain.order <= ORDER_MAX:
            out.append(f"spec.drain.order: {str(drain.order)[:24]} is outside the int32 range")
        elif drain.order != 0 and drain.behavior != DrainBehavior.DRAIN:
            out.append("spec.drain.order: may only be set when the behavior is Drain")
    for i, machines in enumerate(rule.spec.machines):
        out += [str(e) for e in validate_label_selector(machines.selector, f"spec.machines[{i}].selector")]
    for i, pods in enumerate(rule.spec.pods):
        out += [str(e) for e in validate_label_selector(pods.selector, f"spec.pods[{i}].selector")]
        out += [
            str(e)
            for e in validate_label_selector(pods.namespace_selector, f"spec.pods[{i}].namespaceSelector")
        ]
    return out


def summary(found: list[str]) -> str:
    """The problems of a rule as one message of bounded length."""
    more = len(found) - _PROBLEMS_SHOWN
    text = "; ".join(p[:200] for p in found[:_PROBLEMS_SHOWN])
    return text + (f"; and {more} more" if more > 0 else "")
