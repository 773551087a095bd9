"""Seed mode's tenants (``mcm_tasks/tenancy.py``): a served namespace's settings view, the queue names
that say whose a message is, and the worker's queue changes as namespaces come and go."""

from __future__ import annotations

import math
import threading

import pytest

from mcm_tasks.kinds import QUEUES
from mcm_tasks.seed_queues import RESTATE_EVERY, consumed_kinds, queue_changes, quiet_round
from mcm_tasks.settings import SettingsError, get_settings, load_settings
from mcm_tasks.tenancy import (
    carried,
    current_namespace,
    is_tenant,
    process_settings,
    queue_names,
    serving,
    tenant_of_queue,
    tenant_settings,
)


@pytest.fixture
def base() -> object:
    return load_settings({"namespaces": "shoot-a,shoot-b", "namespace": "garden"})


def test_a_tenants_view_is_its_namespace_and_prefix_under_the_installation(base: object) -> None:
    view = tenant_settings(base, "shoot-a")  # type: ignore[arg-type]
    assert view.namespace == "shoot-a" and view.key_prefix == "mcm:ns:shoot-a"
    assert view.install_prefix == "mcm" and is_tenant(view) and not view.seed_mode
    assert view.queue_name("machine") == "mcm:ns:shoot-a.machine"
    assert tenant_settings(base, "shoot-a") is view  # cached: compiled scripts stay warm
    assert not is_tenant(base)  # type: ignore[arg-type]


def test_serving_scopes_get_settings_and_nests_back_out(base: object) -> None:
    outside = get_settings()
    with serving("shoot-a", base) as view:  # type: ignore[arg-type]
        assert get_settings() is view and current_namespace() == "shoot-a"
        assert process_settings() is outside  # the installation's, whatever tenant runs
        with serving("shoot-b", base):  # type: ignore[arg-type]
            assert current_namespace() == "shoot-b"
        assert current_namespace() == "shoot-a"
    assert get_settings() is outside and current_namespace() is None


def test_a_thread_started_through_carried_serves_its_creators_tenant(base: object) -> None:
    seen: list[str | None] = []
    with serving("shoot-b", base):  # type: ignore[arg-type]
        plain = threading.Thread(target=lambda: seen.append(current_namespace()))
        kept = threading.Thread(target=carried(lambda: seen.append(current_namespace())))
    for thread in (plain, kept):
        thread.start()
        thread.join()
    assert seen == [None, "shoot-b"]


@pytest.mark.parametrize(
    ("queue", "expected"),
    [
        ("mcm:ns:shoot-a.machine", ("shoot-a", "machine")),
        ("mcm:ns:shoot--x--y.machine-termination", ("shoot--x--y", "machine-termination")),
        ("mcm.machine", None),  # the installation's own queue
        ("mcm:ns:shoot-a.bogus", None),
        ("mcm:ns:.machine", None),
        ("other:ns:shoot-a.machine", None),
        ("mcm:ns:a:b.machine", None),
        ("", None),
    ],
)
def test_a_queue_name_says_whose_messages_it_holds(queue: str, expected: tuple[str, str] | None) -> None:
    assert tenant_of_queue(queue, "mcm") == expected


def test_a_worker_follows_the_served_namespaces(base: object) -> None:
    kinds = ["machine", "node"]
    names = queue_names(base, ["shoot-a", "shoot-b"], kinds)  # type: ignore[arg-type]
    assert names == [
        "mcm:ns:shoot-a.machine",
        "mcm:ns:shoot-a.node",
        "mcm:ns:shoot-b.machine",
        "mcm:ns:shoot-b.node",
    ]
    add, cancel = queue_changes(set(names[:2]), set(names[2:]))
    assert add == names[2:] and cancel == names[:2]
    own = [base.queue_name(k) for k in QUEUES]  # type: ignore[attr-defined]
    assert consumed_kinds(base, [*own[:2], "mcm:ns:shoot-a.machine"]) == list(QUEUES)[:2]  # type: ignore[arg-type]


def test_seed_flags_are_checked() -> None:
    with pytest.raises(SettingsError, match="exclude each other"):
        load_settings({"namespaces": "a", "namespace_selector": "x=y"})
    with pytest.raises(SettingsError, match="not a namespace name"):
        load_settings({"namespaces": "a,Not_A_Name"})
    with pytest.raises(SettingsError, match="not a Secret name"):
        load_settings({"namespaces": "a", "target_kubeconfig_secret": "../etc"})
    assert not load_settings({}).seed_mode
    assert load_settings({"namespace_selector": "seed=true"}).seed_mode


def test_a_seed_queues_round_stops_early_only_while_nothing_it_works_from_moved() -> None:
    """The worker's seed-queues thread works out its queues again when the registry's generation or
    the queues it consumes moved, at least every ``RESTATE_EVERY``, and at every round without a
    generation to go by."""
    queues = frozenset({"mcm:ns:a.machine", "mcm.machine"})
    state = ("7", queues)
    assert not quiet_round(state, None, 100.0, -math.inf)  # the first round
    assert quiet_round(state, ("7", frozenset(queues)), 101.0, 100.0)
    assert not quiet_round(("8", queues), state, 101.0, 100.0)  # a namespace published or gone
    assert not quiet_round(("7", queues | {"mcm:ns:b.machine"}), state, 101.0, 100.0)  # a queue added
    assert not quiet_round(state, state, 100.0 + RESTATE_EVERY, 100.0)  # the versions noted again
    assert not quiet_round(("", queues), ("", queues), 101.0, 100.0)  # no generation kept
    assert not quiet_round((None, queues), (None, queues), 101.0, 100.0)
