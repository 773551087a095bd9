"""Namespace leases of seed mode (``informers.shards_io.ShardKeeper``) on a real Redis: keepers
converge to a disjoint cover of the namespaces; a keeper that stops ticking (killed) has its
namespaces taken by the others once its leases expire, and not before; a graceful stop hands over on
the others' next tick; a lease taken after expiry is reported stopped; and at no observed instant do
two keepers run one namespace, through joins, kills and stops."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from prometheus_client import REGISTRY
from redis.backoff import NoBackoff
from redis.retry import Retry

from informers.shards import owner
from informers.shards_io import Ownership, ShardKeeper, holders, lease_key, members_key
from mcm_sandbox.procs import wait_until

pytestmark = pytest.mark.integration

PREFIX = "mcm-test"
LEASE, RENEW = 1.5, 0.2
NAMESPACES = frozenset(f"shoot--p{i % 5}--c{i}" for i in range(60))


@pytest.fixture()
def clients(redis_url: str) -> Iterator[Callable[[], redis.Redis]]:
    """New clients on the test's database, half answering bytes, half text (the keeper takes both)."""
    made: list[redis.Redis] = []
    flavours = itertools.cycle((False, True))

    def make() -> redis.Redis:
        made.append(redis.Redis.from_url(redis_url, decode_responses=next(flavours)))
        return made[-1]

    yield make
    for client in made:
        client.close()


def keepers(clients: Callable[[], redis.Redis], *names: str, lease: float = LEASE) -> list[ShardKeeper]:
    return [ShardKeeper(clients(), PREFIX, name, lease_seconds=lease, renew_every=RENEW) for name in names]


def tick_all(members: list[ShardKeeper], wanted: frozenset[str] = NAMESPACES) -> list[Ownership]:
    return [k.tick(wanted) for k in members]


def assert_disjoint_cover(members: list[ShardKeeper], wanted: frozenset[str] = NAMESPACES) -> None:
    owned = [k.owned for k in members]
    assert sum(len(o) for o in owned) == len(wanted), [len(o) for o in owned]
    assert frozenset().union(*owned) == wanted
    names = [k.member_id for k in members]
    for k in members:  # each runs what rendezvous hashing gives it
        assert k.owned == {ns for ns in wanted if owner(ns, names) == k.member_id}


def handovers(direction: str) -> float:
    return REGISTRY.get_sample_value("mcm_informer_shard_handovers_total", {"direction": direction}) or 0.0


def test_three_keepers_converge_to_a_disjoint_cover(clients: Callable[[], redis.Redis]) -> None:
    a, b, c = members = keepers(clients, "a", "b", "c")
    acquired, released = handovers("acquired"), handovers("released")
    first = tick_all(members)
    assert first[0].started == NAMESPACES  # alone so far: a takes everything
    assert not first[1].started and not first[2].started  # held by a
    second = tick_all(members)  # a sees b and c: gives up theirs, reported before their leases go
    assert second[0].stopped and second[0].owned == NAMESPACES - second[0].stopped
    assert holders(a.client, PREFIX) == dict.fromkeys(NAMESPACES, "a")
    tick_all(members)  # a deletes those leases, b and c take them
    assert_disjoint_cover(members)
    assert holders(b.client, PREFIX) == {ns: k.member_id for k in members for ns in k.owned}
    assert a.members == b.members == c.members == ("a", "b", "c")
    assert handovers("acquired") - acquired == 60 + len(b.owned) + len(c.owned)
    assert handovers("released") - released == len(b.owned) + len(c.owned)
    assert REGISTRY.get_sample_value("mcm_informer_shard_namespaces") == len(c.owned)  # the last to tick
    steady = tick_all(members)  # nothing changes
    assert all(not o.started and not o.stopped for o in steady)


def test_namespaces_no_longer_wanted_are_released(clients: Callable[[], redis.Redis]) -> None:
    (a,) = keepers(clients, "a")
    a.tick({"x", "y"})
    ownership = a.tick({"x"})
    assert ownership.stopped == {"y"} and ownership.owned == {"x"}
    assert a.client.exists(lease_key(PREFIX, "y"))  # until the next tick: the caller stops it first
    a.tick({"x"})
    assert not a.client.exists(lease_key(PREFIX, "y"))


def test_a_killed_keepers_namespaces_are_taken_once_its_leases_expire(
    clients: Callable[[], redis.Redis],
) -> None:
    members = keepers(clients, "a", "b", "c")
    for _ in range(3):
        tick_all(members)
    assert_disjoint_cover(members)
    a, b, c = members
    orphans = c.owned
    killed_at = c.valid_until - LEASE  # its last tick: c is never called again
    taken_early: list[float] = []

    def survivors_cover() -> bool:
        tick_all([a, b])
        now = time.monotonic()
        if (a.owned | b.owned) & orphans and now < c.valid_until:
            taken_early.append(now)
        return a.owned | b.owned == NAMESPACES

    wait_until(survivors_cover, timeout=10 * LEASE, interval=RENEW / 2, what="a and b run every namespace")
    took = time.monotonic() - killed_at
    assert not taken_early, "a namespace was taken while the killed keeper's lease could still hold"
    assert took <= LEASE + RENEW + 1.0, took  # the lease, one tick of the survivors, a loaded host's slack
    assert_disjoint_cover([a, b])
    assert c.owned_at() == frozenset()  # past its validity: whoever calls it must not run them


def test_a_graceful_stop_hands_over_on_the_next_tick(clients: Callable[[], redis.Redis]) -> None:
    members = keepers(clients, "a", "b", "c")
    for _ in range(3):
        tick_all(members)
    a, b, c = members
    orphans = c.owned
    assert c.stop() == orphans and c.owned == frozenset()
    assert "c" not in a.client.zrange(members_key(PREFIX), 0, -1, withscores=False) and not c.owned_at()
    taken = tick_all([a, b])
    assert taken[0].started | taken[1].started == orphans
    assert_disjoint_cover([a, b])


def test_a_lease_taken_after_expiry_is_reported_stopped(clients: Callable[[], redis.Redis]) -> None:
    (a,) = keepers(clients, "a", lease=0.5)
    thief = clients()
    a.tick({"x", "y"})
    lost = handovers("lost")
    wait_until(lambda: not thief.exists(lease_key(PREFIX, "x")), timeout=5, what="a's lease on x to expire")
    assert a.owned_at() == frozenset()  # its validity ended no later than the lease
    assert thief.set(lease_key(PREFIX, "x"), "thief", nx=True, px=10_000)  # another member took it
    ownership = a.tick({"x", "y"})
    # both were lost (y expired untaken: someone may have run it meanwhile) and are not retaken at once
    assert ownership.stopped == {"x", "y"} and ownership.owned == frozenset() and not ownership.started
    assert handovers("lost") - lost == 2
    again = a.tick({"x", "y"})  # the next tick takes what is free again, and leaves x to its holder
    assert again.started == {"y"} and again.owned == {"y"}
    assert thief.get(lease_key(PREFIX, "x")) in (b"thief", "thief")


def test_a_keeper_without_redis_keeps_its_namespaces_until_the_leases_may_expire(
    clients: Callable[[], redis.Redis],
) -> None:
    now = [1000.0]
    keeper = ShardKeeper(clients(), PREFIX, "a", lease_seconds=LEASE, renew_every=RENEW, clock=lambda: now[0])
    assert keeper.tick({"x"}).owned == {"x"}
    keeper.client = redis.Redis(port=1, retry=Retry(NoBackoff(), 0))  # Redis unreachable
    now[0] += LEASE / 2
    held = keeper.tick({"x"})
    assert held.owned == {"x"} and not held.stopped and keeper.owned_at() == {"x"}
    now[0] += LEASE / 2
    dropped = keeper.tick({"x"})
    assert dropped.stopped == {"x"} and dropped.owned == frozenset() and keeper.owned_at() == frozenset()


class Process:
    """An informer process: ticks in its own thread and runs what the ticks give it (the caller's
    side of the contract: stop what a tick reports stopped before the next tick)."""

    def __init__(self, keeper: ShardKeeper) -> None:
        self.keeper = keeper
        self.running: set[str] = set()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.graceful = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.done.is_set():
            ownership = self.keeper.tick(NAMESPACES)
            with self.lock:
                self.running -= ownership.stopped
                self.running |= ownership.started
            self.done.wait(RENEW)
        if self.graceful:
            with self.lock:
                self.running.clear()
            self.keeper.stop()

    def runs(self, now: float) -> frozenset[str]:
        """What it runs at ``now``: nothing once its validity ended (it stops by itself)."""
        with self.lock:
            return frozenset(self.running) if now < self.keeper.valid_until else frozenset()

    def kill(self) -> None:  # SIGKILL: no more ticks, no release
        self.done.set()
        self.thread.join()

    def shutdown(self) -> None:
        self.graceful = True
        self.kill()


def test_never_two_owners_through_joins_kills_and_stops(clients: Callable[[], redis.Redis]) -> None:
    procs = {n: Process(k) for n, k in zip("ab", keepers(clients, "a", "b"), strict=True)}
    violations: list[str] = []
    observed = [0]
    watching = threading.Event()

    def observe() -> None:
        while not watching.is_set():
            start = time.monotonic()
            views = {n: p.runs(start) for n, p in list(procs.items())}
            if time.monotonic() - start > RENEW / 2:
                continue  # a stalled snapshot spans a handover: not one instant
            for (n1, v1), (n2, v2) in itertools.combinations(views.items(), 2):
                if v1 & v2:
                    violations.append(f"{n1} and {n2} both run {sorted(v1 & v2)}")
            observed[0] += 1
            time.sleep(0.005)

    observer = threading.Thread(target=observe, daemon=True)
    observer.start()

    def covered_by(names: str) -> Callable[[], bool]:
        """Each of ``names`` runs its rendezvous share, so together they cover every namespace."""

        def check() -> bool:
            now = time.monotonic()
            return all(
                procs[n].runs(now) == {ns for ns in NAMESPACES if owner(ns, names) == n} for n in names
            )

        return check

    try:
        wait_until(covered_by("ab"), timeout=10, what="a and b cover")
        procs["c"] = Process(keepers(clients, "c")[0])  # joins: takes about a third
        wait_until(covered_by("abc"), timeout=10, what="a, b and c cover")
        procs["a"].kill()
        wait_until(covered_by("bc"), timeout=10 * LEASE, what="b and c take the killed a's namespaces")
        procs["d"] = Process(keepers(clients, "d")[0])
        wait_until(covered_by("bcd"), timeout=10, what="b, c and d cover")
        procs["b"].shutdown()
        wait_until(covered_by("cd"), timeout=10, what="c and d take the stopped b's namespaces")
    finally:
        watching.set()
        observer.join()
        for p in procs.values():
            p.kill()
    assert not violations, violations[:5]
    assert observed[0] > 100


def test_run_hands_changes_to_apply_and_leaves_on_stop(clients: Callable[[], redis.Redis]) -> None:
    keeper, other = keepers(clients, "a", "b")
    running: set[str] = set()
    changes: list[Ownership] = []

    def apply(ownership: Ownership) -> None:
        changes.append(ownership)
        running.difference_update(ownership.stopped)
        running.update(ownership.started)

    stop = threading.Event()
    thread = threading.Thread(target=keeper.run, args=(lambda: NAMESPACES, apply, stop), daemon=True)
    thread.start()
    try:
        wait_until(lambda: running == NAMESPACES, timeout=5, what="a runs every namespace")
        stop.set()
        thread.join(timeout=5)
        assert not thread.is_alive()
    finally:
        stop.set()
    assert running == set() and changes[-1].stopped == NAMESPACES  # stopped before the leases went
    assert holders(other.client, PREFIX) == {}
    assert other.tick(NAMESPACES).started == NAMESPACES  # at once: no lease to wait for
