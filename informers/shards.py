"""Which informer process runs which namespace, in seed mode: the decision (``shards_io`` acts on it).

Each live informer process is a member; a namespace belongs to the member with the highest
rendezvous weight (highest-random-weight hashing: ``blake2b(member, namespace)``), so every member
computes the same owner from the same member list without talking to the others, the namespaces
spread evenly, a member that joins takes about ``1/n`` of them from the others and a member that
leaves hands over only its own. The decision alone does not keep two processes from both running a
namespace while their member lists differ for a moment: a lease per namespace does
(``shards_io.ShardKeeper``), and this module says which leases a member should take and give up.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass


def weight(member: str, namespace: str) -> int:
    """The rendezvous weight of ``member`` for ``namespace``: stable across processes, Python
    versions and hosts (no ``hash()``, which is salted per process)."""
    digest = hashlib.blake2b(f"{member}\0{namespace}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(namespace: str, members: Iterable[str]) -> str | None:
    """The member that should run ``namespace``, or None when there is no member. Ties (a 64-bit
    collision) go to the greater member id, so every member breaks them alike."""
    best: tuple[int, str] | None = None
    for member in members:
        candidate = (weight(member, namespace), member)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else best[1]


@dataclass(frozen=True)
class Plan:
    """What a member does with its leases this tick."""

    #: namespaces it should run and does not hold: try to take their leases
    acquire: frozenset[str]
    #: namespaces it holds that another live member should run, or that nobody wants any more
    release: frozenset[str]
    #: namespaces it holds and should keep running
    keep: frozenset[str]


def plan(wanted: Collection[str], members: Collection[str], me: str, held: Collection[str]) -> Plan:
    """The plan of member ``me`` holding ``held``, given the namespaces to serve (``wanted``) and
    the live members. ``me`` counts as live whether or not ``members`` names it: it is deciding."""
    live = set(members) | {me}
    mine = {ns for ns in wanted if owner(ns, live) == me}
    holding = set(held)
    return Plan(
        acquire=frozenset(mine - holding),
        release=frozenset(holding - mine),
        keep=frozenset(holding & mine),
    )
