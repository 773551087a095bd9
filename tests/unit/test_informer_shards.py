"""Who runs which namespace in seed mode (``informers.shards``): rendezvous hashing over the live
members spreads namespaces evenly, a member that joins takes about 1/n of them and only from the
others, one that leaves hands over only its own; and the plan a member follows with its leases."""

from __future__ import annotations

from collections import Counter

import pytest

from informers.shards import Plan, owner, plan, weight

NAMESPACES = [f"shoot--project{i % 7}--cluster-{i}" for i in range(300)]
MEMBERS = ["informer-7d9f-abcde", "informer-7d9f-fghij", "informer-7d9f-klmno"]


def owners(members: list[str]) -> dict[str, str | None]:
    return {ns: owner(ns, members) for ns in NAMESPACES}


def test_weight_is_stable_across_processes() -> None:
    # blake2b, not hash(): every member and every Python computes the same figure
    assert weight("informer-0", "shoot--a--b") == weight("informer-0", "shoot--a--b")
    assert weight("informer-0", "shoot--a--b") != weight("informer-1", "shoot--a--b")
    assert weight("a", "bc") != weight("ab", "c")  # member and namespace are kept apart


def test_no_members_no_owner() -> None:
    assert owner("ns", []) is None


def test_owner_does_not_depend_on_the_members_order() -> None:
    assert owners(MEMBERS) == owners(list(reversed(MEMBERS)))


def test_spread_over_three_members_is_within_30_percent() -> None:
    counts = Counter(owners(MEMBERS).values())
    assert set(counts) == set(MEMBERS)
    for member in MEMBERS:
        assert 70 <= counts[member] <= 130, counts


def test_a_member_that_joins_takes_about_one_nth_and_only_from_the_others() -> None:
    before = owners(MEMBERS)
    after = owners([*MEMBERS, "informer-7d9f-pqrst"])
    moved = {ns for ns in NAMESPACES if before[ns] != after[ns]}
    assert all(after[ns] == "informer-7d9f-pqrst" for ns in moved)  # nothing moves between old members
    assert 75 * 0.7 <= len(moved) <= 75 * 1.3  # 300 / 4


def test_a_member_that_leaves_hands_over_only_its_own() -> None:
    before = owners(MEMBERS)
    after = owners(MEMBERS[:2])
    moved = {ns for ns in NAMESPACES if before[ns] != after[ns]}
    assert moved == {ns for ns in NAMESPACES if before[ns] == MEMBERS[2]}
    assert all(after[ns] in MEMBERS[:2] for ns in moved)


def test_plan_acquires_its_own_releases_others_and_keeps_the_rest() -> None:
    mine = {ns for ns in NAMESPACES if owner(ns, MEMBERS) == MEMBERS[0]}
    not_mine = sorted(set(NAMESPACES) - mine)
    kept = set(sorted(mine)[:10])
    held = kept | {not_mine[0], "shoot--gone--cluster"}  # another's, and one nobody wants any more
    decided = plan(set(NAMESPACES), MEMBERS, MEMBERS[0], held)
    assert decided == Plan(
        acquire=frozenset(mine - kept),
        release=frozenset({not_mine[0], "shoot--gone--cluster"}),
        keep=frozenset(kept),
    )


def test_plan_counts_me_live_even_when_the_members_do_not_name_me() -> None:
    alone = plan({"a", "b", "c"}, [], "me", set())
    assert alone == Plan(acquire=frozenset({"a", "b", "c"}), release=frozenset(), keep=frozenset())
    assert plan({"a"}, ["other"], "me", set()) == plan({"a"}, ["other", "me"], "me", set())


@pytest.mark.parametrize("wanted", [set(), {"x"}])
def test_plan_releases_what_is_no_longer_wanted(wanted: set[str]) -> None:
    decided = plan(wanted, ["me"], "me", {"old"})
    assert decided.release == {"old"}
    assert decided.acquire == wanted


def test_the_members_plans_cover_the_wanted_disjointly() -> None:
    plans = [plan(set(NAMESPACES), MEMBERS, me, set()) for me in MEMBERS]
    assert sum(len(p.acquire) for p in plans) == len(NAMESPACES)
    assert set().union(*(p.acquire for p in plans)) == set(NAMESPACES)
