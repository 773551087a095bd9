"""Helpers of the informer tests: a clean Redis client (fixture, registered by the folder conftest),
a writer into the mirror, and the sandbox objects and fault rules the informer tests create."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kubernetes.client import ApiClient

from informers.mirror import Mirror
from informers.processor import Processor, Relisted, WatchEvent
from informers.store import Store
from mcm_sandbox.procs import ApiServer
from mcm_sandbox.testing import fixtures as fx
from mcm_tasks.kube import ops
from mcm_tasks.kube import resources as kres

NS = fx.NS


@pytest.fixture()
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


class Writer:
    def __init__(self, client: redis.Redis) -> None:
        self.processor = Processor(Store(NS))
        self.mirror = Mirror(client)

    def apply(self, *items: WatchEvent | Relisted) -> str | None:
        return self.mirror.write(self.processor.process(items).commit)


def create(api: ApiClient, res: kres.Resource, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    return ops.create(api, res, in_ns(obj, namespace), namespace if res.namespaced else None)


def fault(server: ApiServer, rule: dict[str, Any]) -> str:
    req = urllib.request.Request(
        f"{server.url}/sandbox/faults",
        data=json.dumps(rule).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return str(json.loads(resp.read())["id"])


def clear_faults(server: ApiServer) -> None:
    with urllib.request.urlopen(
        urllib.request.Request(f"{server.url}/sandbox/faults", method="DELETE"), timeout=5
    ):
        pass


def in_ns(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A fixture object moved into ``namespace``, with server-owned fields dropped."""
    meta = {
        k: v
        for k, v in obj["metadata"].items()
        if k not in ("uid", "resourceVersion", "deletionTimestamp", "generation")
    }
    if meta.get("namespace"):
        meta["namespace"] = namespace
    moved = {k: v for k, v in {**obj, "metadata": meta}.items() if k != "status"}
    for ref_field in ("secretRef", "credentialsSecretRef"):
        if ref_field in moved:
            moved[ref_field] = {**moved[ref_field], "namespace": namespace}
    return moved
