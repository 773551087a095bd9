"""A harness for the MachineSet controller's tests: the reconcile runs in-process, on the process's
clusters and a real Redis. The ``harness`` fixture here (tests/unit/) puts the recording fake
(tests/kube_fake.py) there; tests/integration/machineset_support.py the sandbox API server, for
the tests that need the server itself. The cache is fed the way the informer feeds it (its own
Processor, Mirror and routing, expectations included), but only when a test calls ``sync()``:
between two syncs the cache lags, which is exactly what expectations must survive.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
import redis
from kubernetes.client import ApiClient

from informers.mirror import Mirror
from informers.processor import Processor, Relisted
from informers.sink import send_routing
from informers.store import Store
from mcm_sandbox.testing.standins import finish_deletions
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.controllers.machineset.reconcile import reconcile_machine_set
from mcm_tasks.kube import ops
from mcm_tasks.queue import Requeue, expectations
from mcm_tasks.settings import configure, reset_settings
from tests.kube_fake import FakeKube

HOLD = "example.com/hold"


class ExpectationsSink:
    """The informer's queue sink without Celery: expectations applied, keys only recorded."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def enqueue_many(self, items: list[tuple[str, str]]) -> int:
        self.items.extend(items)
        return len(items)

    def enqueue_batched(self, items: list[tuple[str, str]]) -> int:
        return self.enqueue_many(items)

    def creation_observed(self, owner_key: str, count: int) -> None:
        expectations.creation_observed(owner_key, count)

    def deletion_observed(self, owner_key: str, name: str) -> None:
        expectations.deletion_observed(owner_key, name)


@dataclass
class Harness:
    api: ApiClient
    ns: str
    redis: redis.Redis
    store: Store = field(init=False)
    sink: ExpectationsSink = field(default_factory=ExpectationsSink)

    def __post_init__(self) -> None:
        self.store = Store(self.ns)
        self.processor = Processor(self.store)
        self.mirror = Mirror(self.redis)

    # --- the informer's part ---

    def sync(self) -> None:
        """List MachineSets and Machines and apply them as the informer's re-list does (after the
        machine controller's part, ``finish_deletions``)."""
        finish_deletions(self.api, self.ns)
        items = []
        for kind, res in (
            (kinds.MACHINE_SET.mirror, kinds.MACHINE_SET.resource),
            (kinds.MACHINE.mirror, kinds.MACHINE.resource),
        ):
            listed = ops.list_(self.api, res, self.ns)
            items.append(Relisted(kind, listed["items"], str(listed["metadata"].get("resourceVersion", ""))))
        out = self.processor.process(items)
        self.mirror.write(out.commit)
        send_routing(self.sink, out.routing)

    # --- the controller ---

    def key(self, name: str) -> str:
        return f"{self.ns}/{name}"

    def reconcile(self, name: str) -> Requeue | None:
        return reconcile_machine_set(self.key(name))

    def settle(self, name: str, rounds: int = 6) -> None:
        """Sync and reconcile until a pass changes nothing any more (what the queue would do)."""
        for _ in range(rounds):
            self.sync()
            before = self.snapshot()
            self.reconcile(name)
            if self.snapshot() == before:
                return
        raise AssertionError(f"MachineSet {name} did not settle in {rounds} rounds")

    def snapshot(self) -> list[tuple[str, str]]:
        objs = (
            ops.list_(self.api, kinds.MACHINE.resource, self.ns)["items"]
            + ops.list_(self.api, kinds.MACHINE_SET.resource, self.ns)["items"]
        )
        return sorted((o["kind"], o["metadata"]["resourceVersion"]) for o in objs)

    # --- objects ---

    def create_set(
        self,
        name: str,
        replicas: int,
        *,
        labels: dict[str, str] | None = None,
        template_finalizers: list[str] | None = None,
        spec: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        selector = {"app": name}
        template_meta: dict[str, Any] = {"labels": {**selector, "tier": "t"}}
        if template_finalizers:
            template_meta["finalizers"] = template_finalizers
        body = {
            "apiVersion": API_VERSION,
            "kind": "MachineSet",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels or {}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": template_meta,
                    "spec": {"class": {"kind": "MachineClass", "name": "cls"}, **(spec or {})},
                },
            },
        }
        return ops.create(self.api, kinds.MACHINE_SET.resource, body, self.ns)

    def get_set(self, name: str) -> dict[str, Any] | None:
        return ops.get(self.api, kinds.MACHINE_SET.resource, name, self.ns, missing_ok=True)

    def scale(self, name: str, replicas: int) -> None:
        """Through the scale subresource, as kubectl scale and the autoscaler do."""
        ops.patch(
            self.api,
            kinds.MACHINE_SET.resource,
            name,
            {"spec": {"replicas": replicas}},
            self.ns,
            subresource="scale",
        )

    def patch_set(self, name: str, body: dict[str, Any]) -> None:
        ops.patch(self.api, kinds.MACHINE_SET.resource, name, body, self.ns)

    def machines(self, owner: str | None = None) -> list[dict[str, Any]]:
        items = ops.list_(self.api, kinds.MACHINE.resource, self.ns)["items"]
        if owner is None:
            return items
        return [
            m for m in items if any(r.get("name") == owner for r in m["metadata"].get("ownerReferences", []))
        ]

    def active(self, owner: str) -> list[dict[str, Any]]:
        return [m for m in self.machines(owner) if not m["metadata"].get("deletionTimestamp")]

    def create_machine(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        body = {
            "apiVersion": API_VERSION,
            "kind": "Machine",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels},
            "spec": {"class": {"kind": "MachineClass", "name": "cls"}},
        }
        return ops.create(self.api, kinds.MACHINE.resource, body, self.ns)

    def set_phase(self, name: str, phase: str, **last_operation: str) -> None:
        current = ops.get(self.api, kinds.MACHINE.resource, name, self.ns)
        assert current is not None
        current["status"] = {"currentStatus": {"phase": phase}, "lastOperation": last_operation}
        ops.update_status(self.api, kinds.MACHINE.resource, current, self.ns)

    def release_held(self) -> None:
        """What the machine controller does at the end of a deletion: drop the finalizers."""
        for machine in self.machines():
            if machine["metadata"].get("deletionTimestamp") and machine["metadata"].get("finalizers"):
                body = {"metadata": {"finalizers": None}}
                ops.patch(self.api, kinds.MACHINE.resource, machine["metadata"]["name"], body, self.ns)

    def events(self, reason: str) -> list[dict[str, Any]]:
        items = ops.list_(self.api, kinds.EVENT.resource, self.ns)["items"]
        return [e for e in items if e.get("reason") == reason]


@pytest.fixture()
def harness(redis_url: str) -> Iterator[Harness]:
    """A Harness on a ``FakeKube`` installed as the process's clusters, in a namespace of its own
    (the Redis, and so the mirror and the expectations, is shared with the session's other tests).
    Its clock ticks a second a create, so that the deletion orders by age have ages to tell apart.

    Passes are not spaced by their cost (``machine_set_pass_spacing`` 0): the harness runs them back
    to back as decisions, and a pass's CPU on a loaded host (a fresh process's first pass pays its
    lazy imports) would otherwise hand the next one back unrun. The spacing has tests of its own
    (test_machineset_spacing.py)."""
    ns = f"ms-{uuid.uuid4().hex[:8]}"
    configure({"redis_url": redis_url, "namespace": ns, "machine_set_pass_spacing": 0.0})
    client = redis.Redis.from_url(redis_url)
    try:
        with FakeKube(tick=timedelta(seconds=1)).installed() as kube:
            yield Harness(kube, ns, client)
    finally:
        client.close()
        reset_settings()
