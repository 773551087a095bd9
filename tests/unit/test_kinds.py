"""One name per kind: the mirror key, the API resource and the informer's watch spec are all found
from ``kinds.X`` (no second constant to keep in step)."""

from __future__ import annotations

import pytest

from informers.resources import ALL, BY_KIND, CONTROL, TARGET, WATCHES
from mcm_tasks import kinds
from mcm_tasks.cache import layout


def test_each_mirrored_kind_has_one_watch_spec_found_from_the_kind() -> None:
    assert set(WATCHES) == set(kinds.ALL)
    for kind in kinds.ALL:
        spec = WATCHES[kind]
        assert spec.kind == kind.mirror == kind.resource.plural
        assert spec.api is kind.resource
        assert tuple(spec.indexes) == kind.indexes == layout.INDEXES.get(kind.mirror, ())
        assert spec.cluster == (CONTROL if kind in kinds.CONTROL else TARGET)
        assert BY_KIND[kind.mirror] is spec
    assert [r.kind for r in ALL] == [k.mirror for k in kinds.ALL] == list(layout.ALL_KINDS)


def test_resource_for_kind_covers_written_kinds_too() -> None:
    for kind in (*kinds.ALL, kinds.EVENT, kinds.LEASE, kinds.NAMESPACE):
        assert kinds.resource_for_kind(kind.resource.kind) is kind.resource
    assert (
        tuple(
            k.resource
            for k in (kinds.MACHINE, kinds.MACHINE_SET, kinds.MACHINE_DEPLOYMENT, kinds.MACHINE_CLASS)
        )
        == kinds.MCM_RESOURCES
    )
    with pytest.raises(KeyError):
        kinds.resource_for_kind("Gizmo")
