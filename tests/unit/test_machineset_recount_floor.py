"""The recount floor of a MachineSet whose deployment rolls (``spacing.rolling``): whole passes on the
recording fake and a real Redis. A set alone in its deployment raises the floor when it only
recounts; a set with a sibling that holds replicas (a rollout in flight) does not, so the surge
steps that wait on its counts are not held back."""

from __future__ import annotations

import uuid

from mcm_tasks.api import API_VERSION, MachineSet
from mcm_tasks.controllers.machineset.spacing import rolling
from mcm_tasks.kinds import Queue
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.redisdb import get_redis
from tests.machineset_support import Harness

DEPLOYMENT_UID = str(uuid.uuid4())


def _owned(harness: Harness, name: str) -> None:
    harness.patch_set(name, {"metadata": {"ownerReferences": [{
        "apiVersion": API_VERSION, "kind": "MachineDeployment", "name": "md", "uid": DEPLOYMENT_UID,
        "controller": True, "blockOwnerDeletion": True,
    }]}})  # fmt: skip


def _floored(harness: Harness, name: str) -> bool:
    return get_redis().get(queue_keys(Queue.MACHINE_SET).floor + harness.key(name)) is not None


def _set(uid: str, replicas: int, status_replicas: int = 0) -> MachineSet:
    return MachineSet.model_validate({
        "metadata": {"name": uid, "namespace": "ns", "uid": uid},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"a": "b"}}},
        "status": {"replicas": status_replicas},
    })  # fmt: skip


def test_rolling_is_another_set_of_the_deployment_with_replicas() -> None:
    me = _set("new", 3)
    assert not rolling(me, [me])
    assert not rolling(me, [me, _set("old", 0)])
    assert rolling(me, [me, _set("old", 2)])
    assert rolling(me, [me, _set("old", 0, status_replicas=1)])  # still draining


def test_a_set_alone_is_floored_and_one_beside_an_active_sibling_is_not(harness: Harness) -> None:
    harness.create_set("new", 2)
    harness.create_set("old", 1, labels={"old": "yes"})
    for name in ("new", "old"):
        _owned(harness, name)
    harness.settle("new")  # creates its machines (a pass that acts raises no floor), then recounts
    harness.settle("old")
    harness.sync()
    harness.reconcile("new")  # a recount beside a sibling that holds a replica
    assert not _floored(harness, "new")

    harness.scale("old", 0)
    harness.settle("old")
    harness.sync()
    harness.reconcile("new")  # a recount, its deployment no longer rolling
    assert _floored(harness, "new")


def test_a_recount_holds_the_next_machine_woken_pass_for_five_seconds_by_default(harness: Harness) -> None:
    """The default interval: fifty sets of twenty scaled at once recount, status write and
    deployment pass included, once per interval each; at 2 s those passes took a quarter of the
    seed's scale-up CPU, at 5 s they take a tenth and the scale-up ends sooner, its statuses
    settled sooner too (docs/performance.md, "A longer recount floor")."""
    harness.create_set("alone", 2)
    harness.settle("alone")
    harness.sync()
    harness.reconcile("alone")
    left = get_redis().pttl(queue_keys(Queue.MACHINE_SET).floor + harness.key("alone"))
    assert 4000 < left <= 5000
