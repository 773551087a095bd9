"""An object the informer mirrored but our models refuse, read through the listers of a real Redis:
it is left out of every list (plain, shared, synced, by index), so it cannot fail the reconcile of
its neighbours, and a get of it raises Unreadable for its own reconcile to answer."""

from __future__ import annotations

import pytest
import redis

from informers.processor import Relisted
from mcm_sandbox.testing import fixtures as fx
from mcm_tasks import kinds
from mcm_tasks.cache.listers import Listers, new_listers
from mcm_tasks.cache.models import Unreadable
from mcm_tasks.cache.reader import CacheReader
from tests.integration.informer_support import Writer

pytestmark = pytest.mark.integration
NS = fx.NS


@pytest.fixture()
def listers(client: redis.Redis) -> Listers:
    bad = fx.machine("bad", machine_set="s")
    bad["spec"]["class"] = {"kind": "MachineClass", "name": ["a", "list"]}  # no schema here to refuse it
    good = fx.machine("good", machine_set="s")
    Writer(client).apply(Relisted(kinds.MACHINE.mirror, [good, bad], "5", initial=True))
    return new_listers(NS, CacheReader(client))


def test_lists_leave_an_unreadable_object_out(listers: Listers) -> None:
    for lister in (listers.machines, listers.machines.shared):
        assert [m.metadata.name for m in lister.list()] == ["good"]
        synced = lister.list_if_synced()
        assert synced is not None and [m.metadata.name for m in synced] == ["good"]
        assert [m.metadata.name for m in lister.owned_by("uid-s")] == ["good"]


def test_a_get_of_it_says_what_is_wrong(listers: Listers) -> None:
    for lister in (listers.machines, listers.machines.shared):
        with pytest.raises(Unreadable) as caught:
            lister.get("bad")
        assert "spec.class.name" in caught.value.problem
        assert caught.value.identity["metadata"]["name"] == "bad"
    assert listers.machines.raw.get("bad") is not None  # the mirror holds it as the API server has it
