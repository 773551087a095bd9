"""The fold of a pass's phases (``common.phases.run_phases``, Cluster API's ``doReconcile``)."""

from __future__ import annotations

from collections.abc import Callable

from mcm_tasks.controllers.common.phases import Halt, PhaseResult, run_phases
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import get_settings


def scope() -> PassScope[list[str]]:
    return PassScope(key="k", obj=[], settings=get_settings(), listers=None)  # type: ignore[arg-type]


Phase = Callable[[PassScope[list[str]]], PhaseResult]


def phase(name: str, answer: PhaseResult) -> Phase:
    def run(s: PassScope[list[str]]) -> PhaseResult:
        s.obj.append(name)
        return answer

    return run


def test_every_phase_runs_in_order_and_the_soonest_requeue_wins_with_every_note() -> None:
    s = scope()
    phases = [phase("a", Requeue(60, "held: A")), phase("b", None), phase("c", Requeue(5))]
    assert run_phases(s, phases) == Requeue(5, "held: A")
    assert s.obj == ["a", "b", "c"]


def test_a_pass_no_phase_asks_anything_of_comes_back_at_the_long_retry() -> None:
    assert run_phases(scope(), [phase("a", None)]) == Requeue.long()


def test_a_halt_ends_the_pass_with_its_answer_and_the_later_phases_do_not_run() -> None:
    s = scope()
    phases = [phase("a", Requeue(1)), phase("b", Halt(Requeue(30))), phase("c", Requeue(0.1))]
    assert run_phases(s, phases) == Requeue(30)
    assert s.obj == ["a", "b"]
    assert run_phases(scope(), [phase("x", Halt())]) is None
