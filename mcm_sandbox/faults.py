"""Fault injection rules for the sandbox API server's reliability tests.

Tests switch on a failure mode for a while (503s, hangs, latency, cut watch streams) for some verbs
and resources and check that controllers ride it out. The rules are pure data with an injectable
clock so that expiry is tested without sleeping; the server applies them.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"})
FaultAction = Literal["error", "hang", "latency", "cut-watches"]


class FaultRule(BaseModel):
    """One rule. Empty ``verbs``/``resources`` match everything; a resource also matches its
    subresources (``pods`` matches ``pods/status`` and ``pods/eviction``). ``cut-watches`` only
    ever applies to watch requests."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: FaultAction
    status_code: int = Field(default=503, ge=400, le=599)
    message: str = "the sandbox API server is injecting faults"
    latency_ms: int = Field(default=0, ge=0)
    verbs: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    duration_seconds: float | None = Field(default=None, gt=0)
    #: the rule answers at most this many requests, then is gone (None: no limit)
    times: int | None = Field(default=None, gt=0)
    id: str = ""
    expires_at: float | None = None

    @field_validator("verbs")
    @classmethod
    def _known_verbs(cls, verbs: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(verbs) - VERBS)
        if unknown:
            raise ValueError(f"unknown verbs {unknown}; expected some of {sorted(VERBS)}")
        return verbs

    @model_validator(mode="after")
    def _latency_needs_a_delay(self) -> FaultRule:
        if self.action == "latency" and self.latency_ms <= 0:
            raise ValueError("a latency rule needs latency_ms > 0")
        return self

    def applies_to(self, verb: str, resource: str) -> bool:
        if self.action == "cut-watches" and verb != "watch":
            return False
        if self.verbs and verb not in self.verbs:
            return False
        if not self.resources:
            return True
        base = resource.split("/", 1)[0]
        return resource in self.resources or base in self.resources

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


class FaultSet:
    """The active rules, first added first matched. Not thread-safe: one event loop owns it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._rules: list[FaultRule] = []
        self._ids = itertools.count(1)

    def add(self, rule: FaultRule, now: float | None = None) -> str:
        """Activate ``rule`` (its duration counts from ``now``) and return its id."""
        start = self._clock() if now is None else now
        rule_id = f"fault-{next(self._ids)}"
        expires = None if rule.duration_seconds is None else start + rule.duration_seconds
        self._rules.append(rule.model_copy(update={"id": rule_id, "expires_at": expires}))
        return rule_id

    def remove(self, rule_id: str) -> bool:
        before = len(self._rules)
        self._rules = [rule for rule in self._rules if rule.id != rule_id]
        return len(self._rules) != before

    def clear(self) -> None:
        self._rules.clear()

    def active(self, now: float | None = None) -> list[FaultRule]:
        """Unexpired rules in matching order; expired ones are forgotten."""
        moment = self._clock() if now is None else now
        self._rules = [rule for rule in self._rules if not rule.expired(moment)]
        return list(self._rules)

    def match(self, verb: str, resource: str, now: float | None = None) -> FaultRule | None:
        """The first unexpired rule for this request, if any; a rule with ``times`` counts it."""
        for rule in self.active(now):
            if rule.applies_to(verb, resource):
                if rule.times is not None:
                    left = rule.times - 1
                    self._rules = [
                        kept
                        for kept in (rule.model_copy(update={"times": left}) if r.id == rule.id else r
                                     for r in self._rules)
                        if kept.times is None or kept.times > 0
                    ]  # fmt: skip
                return rule
        return None

    def cuts_watches(self, resource: str, now: float | None = None) -> bool:
        """Whether open watches on ``resource`` must be closed now."""
        return any(
            rule.action == "cut-watches" and rule.applies_to("watch", resource) for rule in self.active(now)
        )
