"""An in-place rollout whose two kinds reach the mirror out of the order they were written in.

The deployment moves a machine to the new set in two writes: the machine (its owner, its labels),
then a set's replicas (the old set's down, the new set's up, then the machine's ``update-result``
label off). The informer watches Machines and MachineSets on two streams, and a loaded API server
can deliver either late: here a watch-delay proxy holds one kind's watch 2 s longer than the other's
(``informer_watch_delay_for``), and the lag mode is off (``MCM_MIRROR_LAG_THRESHOLD=0``), so the
passes trust the mirror as a controller with slow watches would. With the sets late, a new set
that counted a moved-in machine before its raise deleted it (4 runs of 5 here without the live
read of ``machineset.reconcile._confirm_live``), and an old set that saw a machine leave before its
own ``scale-up-disabled`` label created a machine of the old template in its place (once under
CI's load; the rollout then emptied the old set under a machine being updated, and the set deleted
it); with the machines late, an old set counts a machine that has moved (the deletion order then
usually picks that one, whose guarded DELETE is refused: ``tests/unit/test_machineset_pass.py``
holds the case it does not). Either way no machine is created or lost: every one keeps its VM and
ends in the new set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.inplace_support import Pool, pool_in
from tests.e2e.support import running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

LATE = 2.0
ENV = {
    "MCM_LONG_RETRY": "10s",
    "MCM_MACHINE_HEALTH_TIMEOUT": "3s",
    "MCM_MACHINE_DRAIN_TIMEOUT": "10s",
    "MCM_MACHINE_INPLACE_UPDATE_TIMEOUT": "90s",
    "MCM_MIRROR_LAG_THRESHOLD": "0",
}


@pytest.fixture(scope="module", params=["machinesets", "machines"], ids=["sets-late", "machines-late"])
def pool(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    directory = Path(tmp_path_factory.mktemp(f"inplace-lag-{request.param}"))
    late = {request.param: LATE}
    with (
        running_sandbox(directory, ENV, with_beat=False, informer_watch_delay_for=late) as sandbox,
        pool_in(sandbox) as made,
    ):
        yield made


def test_an_in_place_rollout_with_one_kind_late_loses_no_machine(pool: Pool) -> None:
    pool.deployment("late", 3, "Auto", max_unavailable=1)
    before = pool.running("late")
    pool.update("late")
    pool.wait(lambda: pool.rolled("late", 3), "every machine updated in place and moved", timeout=240)
    after = pool.running("late")
    lost = sorted(set(before) - set(after))
    assert not lost, f"the same machines, updated in place; lost {lost}: {pool.story(lost)}"
    created = sorted(set(after) - set(before))
    assert not created, f"no machine created: {pool.story(created)}"
