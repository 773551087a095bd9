"""Each strategy's next step given a set of MachineSets, and a whole RollingUpdate driven step by
step against a model of the MachineSet controller, checking the surge and availability budgets at
every step (also when the deployment decides on statuses that lag behind)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from mcm_tasks.api import MachineDeployment, MachineSet
from mcm_tasks.api.constants import MACHINE_TEMPLATE_HASH_LABEL_KEY, REVISION_ANNOTATION
from mcm_tasks.controllers.machinedeployment.recreate import Step, plan_recreate
from mcm_tasks.controllers.machinedeployment.rollback import plan_rollback, rolled_back
from mcm_tasks.controllers.machinedeployment.rolling import plan_new_set, plan_old_sets, plan_rolling
from tests.unit.machinedeployment_support import deployment, machine_set, template

# --- RollingUpdate: one step -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("olds", "new", "expected"),
    [
        # the new set grows first, by the surge
        ([("old", 10, 10, 10)], ("new", 0, 0, 0), {"new": 2}),
        # at the surge limit with unavailable new machines: old shrinks by maxUnavailable only
        ([("old", 10, 10, 10)], ("new", 2, 2, 0), {"old": 9}),
        # new machines available: old shrinks by what is available above the minimum
        ([("old", 10, 10, 10)], ("new", 2, 2, 2), {"old": 7}),
        # old shrunk: the new set grows into the room
        ([("old", 7, 7, 7)], ("new", 2, 2, 2), {"new": 5}),
        # unhealthy old machines go first, without counting against availability
        ([("old", 10, 10, 7)], ("new", 2, 2, 2), {"old": 7}),
        # … but never beyond the budget left by the new set's unavailable machines
        ([("old", 10, 10, 7)], ("new", 2, 2, 0), {"old": 9}),
        # the new set above replicas (replicas lowered) comes down first
        ([("old", 0, 0, 0)], ("new", 12, 12, 12), {"new": 10}),
        # done: nothing to do
        ([("old", 0, 0, 0)], ("new", 10, 10, 10), {}),
        # two old sets: the oldest shrinks first
        ([("a", 5, 5, 5), ("b", 5, 5, 5)], ("new", 2, 2, 2), {"a": 2}),
    ],
)
def test_plan_rolling_step(
    olds: list[tuple[str, int, int, int]], new: tuple[str, int, int, int], expected: dict[str, int]
) -> None:
    d = deployment(10, surge=2, unavailable=1)
    old_sets = [machine_set(n, spec=s, replicas=r, available=a, age=i) for i, (n, s, r, a) in enumerate(olds)]
    new_set = machine_set(new[0], spec=new[1], replicas=new[2], available=new[3], age=10)
    assert plan_rolling(d, new_set, old_sets) == expected


def test_plan_old_sets_waits_while_new_machines_are_unavailable_and_budget_is_zero() -> None:
    d = deployment(10, surge=1, unavailable=0)
    old = machine_set("old", 10)
    new = machine_set("new", 1, replicas=1, available=0, age=1)
    assert plan_new_set(d, [old, new], new) == {}
    assert plan_old_sets(d, [old, new], new) == {}


def test_plan_rolling_with_zero_surge_uses_one_unavailable() -> None:
    d = deployment(3, surge=0, unavailable=0)
    old = machine_set("old", 3)
    new = machine_set("new", 0, age=1)
    assert plan_rolling(d, new, [old]) == {"old": 2}


# --- RollingUpdate: a whole rollout against a model of the MachineSet controller -------------------------


@dataclass
class SimSet:
    name: str
    spec: int
    age: int
    machines: list[str] = field(default_factory=list)  # "pending" or "ready"

    def model(self) -> MachineSet:
        ready = self.machines.count("ready")
        return machine_set(
            self.name, spec=self.spec, replicas=len(self.machines), available=ready, age=self.age
        )

    def manage(self) -> None:
        """The MachineSet controller: create up to spec, delete unavailable machines first."""
        while len(self.machines) < self.spec:
            self.machines.append("pending")
        while len(self.machines) > self.spec:
            victim = "pending" if "pending" in self.machines else "ready"
            self.machines.remove(victim)

    def boot(self, count: int) -> None:
        for i, state in enumerate(self.machines):
            if count and state == "pending":
                self.machines[i] = "ready"
                count -= 1


def run_rollout(d: MachineDeployment, *, stale_passes: int, boot_per_step: int) -> int:
    """Drive the rollout to the end; returns the number of steps. Asserts the budgets each step."""
    replicas = d.spec.replicas
    surge, unavailable = 2, 1
    old = SimSet("old", replicas, 0, ["ready"] * replicas)
    new = SimSet("new", 0, 10)
    sets = {"old": old, "new": new}
    for step in range(500):
        snapshot = {name: s.model() for name, s in sets.items()}
        for _ in range(stale_passes):
            # the deployment decides again before the sets' statuses changed (specs are current)
            view = {
                name: snap.model_copy(
                    update={"spec": snap.spec.model_copy(update={"replicas": sets[name].spec})}
                )
                for name, snap in snapshot.items()
            }
            for name, size in plan_rolling(d, view["new"], [view["old"]]).items():
                sets[name].spec = size
        for s in sets.values():
            s.manage()
            total = sum(len(x.machines) for x in sets.values())
            ready = sum(x.machines.count("ready") for x in sets.values())
            assert total <= replicas + surge, f"step {step}: {total} machines"
            assert ready >= replicas - unavailable, f"step {step}: {ready} available"
        for s in sets.values():
            s.boot(boot_per_step)
        if new.machines.count("ready") == replicas and not old.machines and old.spec == 0:
            return step
    raise AssertionError("the rollout did not finish")


@pytest.mark.parametrize("stale_passes", [1, 2, 3])
@pytest.mark.parametrize("boot_per_step", [1, 2, 10])
def test_rolling_update_keeps_budgets_at_every_step(stale_passes: int, boot_per_step: int) -> None:
    d = deployment(10, surge=2, unavailable=1)
    steps = run_rollout(d, stale_passes=stale_passes, boot_per_step=boot_per_step)
    assert steps < 60


# --- Recreate --------------------------------------------------------------------------------------------


def test_plan_recreate_steps() -> None:
    d = deployment(4, strategy="Recreate")
    old = machine_set("old", 4)
    new = machine_set("new", 0, age=1)
    assert plan_recreate(d, None, [old], 4).step is Step.SCALE_DOWN_OLD
    assert plan_recreate(d, None, [old], 4).sizes == {"old": 0}
    emptied_status_lags = machine_set("old", 0, replicas=2)
    assert plan_recreate(d, None, [emptied_status_lags], 0).step is Step.WAIT_FOR_OLD_MACHINES
    assert plan_recreate(d, None, [machine_set("old", 0)], 1).step is Step.WAIT_FOR_OLD_MACHINES
    assert plan_recreate(d, None, [machine_set("old", 0)], 0).step is Step.CREATE_NEW
    scale = plan_recreate(d, new, [machine_set("old", 0)], 0)
    assert (scale.step, scale.sizes) == (Step.SCALE_NEW, {"new": 4})
    assert plan_recreate(d, machine_set("new", 4), [], 0).sizes == {}


# --- rollback --------------------------------------------------------------------------------------------


def _history() -> list[MachineSet]:
    return [
        machine_set("v1", 0, revision=1, tmpl=template("class-v1"), age=0),
        machine_set("v2", 0, revision=2, tmpl=template("class-v2"), age=1),
        machine_set("v3", 3, revision=3, tmpl=template("class-v3"), age=2),
    ]


@pytest.mark.parametrize(
    ("to", "target", "changes", "problem"),
    [
        (0, "v2", True, ""),  # 0 = the previous revision
        (1, "v1", True, ""),
        (3, "v3", False, ""),  # the current template: nothing to roll back
        (7, None, False, "Unable to find the revision to rollback to."),
    ],
)
def test_plan_rollback(to: int, target: str | None, changes: bool, problem: str) -> None:
    d = deployment(3, tmpl=template("class-v3"), rollbackTo={"revision": to})
    plan = plan_rollback(d, _history())
    assert (plan.target.metadata.name if plan.target else None, plan.changes_template, plan.problem) == (
        target,
        changes,
        problem,
    )


def test_plan_rollback_without_previous_revision() -> None:
    d = deployment(3, rollbackTo={"revision": 0})
    plan = plan_rollback(d, [machine_set("only", 3, revision=1)])
    assert (plan.target, plan.problem) == (None, "Unable to find last revision.")


def test_rolled_back_takes_template_and_annotations_and_clears_rollback_to() -> None:
    d = deployment(
        3, tmpl=template("class-v3"), annotations={REVISION_ANNOTATION: "3", "x": "1"}, rollbackTo={}
    )
    target = machine_set("v1", 0, revision=1, tmpl=template("class-v1"), annotations={"x": "old"})
    after = rolled_back(d, target, take_template=True)
    assert after.spec.rollback_to is None
    assert after.spec.template.spec.class_.name == "class-v1"
    assert MACHINE_TEMPLATE_HASH_LABEL_KEY not in after.spec.template.metadata.labels
    assert after.metadata.annotations == {REVISION_ANNOTATION: "3", "x": "old"}
    unchanged = rolled_back(d, target, take_template=False)
    assert unchanged.spec.template == d.spec.template and unchanged.spec.rollback_to is None
