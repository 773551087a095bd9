"""What a drain step tells the deletion flow (pure types): the flow turns it into MCM's description
(``deletion_steps.drain_transition``), the drain (``step_io``) produces it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Outcome(StrEnum):
    WAITING = "waiting"
    #: no node to drain (never joined, or no target cluster)
    SKIPPED = "skipped"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    #: the Terminating condition could not be set (upstream's separate message)
    CONDITION_FAILED = "condition-failed"


@dataclass
class DrainResult:
    outcome: Outcome
    forced: bool = False
    errors: list[str] = field(default_factory=list)
    #: WAITING: seconds until the drain wants to look again
    wake_in: float = 0.0
    #: WAITING: the pods that hold the drain and the budgets that refuse them, in words
    #: (``blockers.blockers_message``, without counts), "" when none is refused
    holding: str = ""

    @property
    def message(self) -> str:
        return "; ".join(self.errors)
