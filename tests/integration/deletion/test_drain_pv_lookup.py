"""The drain's PVC and PV lookups retry up to upstream's ``GetPvDetailsMaxRetries`` (3 tries) and then
skip the volume, as upstream's ``getPersistentVolumeNamesForPod`` and ``getVolumeIDFromDriver`` do;
against the sandbox API server failing a given number of requests (its fault rules with ``times``)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from mcm_sandbox.procs import ApiServer
from mcm_tasks.controllers.machine.drain import cluster_io
from tests.integration.deletion.support import Env, unique

pytestmark = pytest.mark.integration


@pytest.fixture()
def faults(server: ApiServer) -> Iterator[Any]:
    def add(resource: str, times: int) -> None:
        rule = {
            "action": "error",
            "status_code": 500,
            "verbs": ["get"],
            "resources": [resource],
            "times": times,
        }
        request = urllib.request.Request(
            server.url + "/sandbox/faults", data=json.dumps(rule).encode(), method="POST",
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        urllib.request.urlopen(request, timeout=5).close()

    yield add
    urllib.request.urlopen(urllib.request.Request(server.url + "/sandbox/faults", method="DELETE"), timeout=5)


def _pod(env: Env, claim: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": env.namespace},
        "spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]},
    }


@pytest.mark.parametrize(
    ("failures", "found"),
    [(0, True), (1, True), (2, True), (3, False)],
    ids=["answered", "one failure", "two failures: the third try answers", "three failures: skipped"],
)
def test_pvc_lookup_retries_then_skips(env: Env, faults: Any, failures: int, found: bool) -> None:
    name = unique("pvc")
    env.volume(name, f"vol-{name}")
    if failures:
        faults("persistentvolumeclaims", failures)
    assert cluster_io.pv_names_of(env.api, _pod(env, name)) == ([name] if found else [])


@pytest.mark.parametrize(("failures", "found"), [(2, True), (3, False)])
def test_pv_lookup_retries_then_skips(env: Env, faults: Any, failures: int, found: bool) -> None:
    name = unique("pv")
    env.volume(name, f"vol-{name}")
    faults("persistentvolumes", failures)
    names, ids = cluster_io.volume_ids_of(env.api, env.driver, [name])
    assert (names, bool(ids)) == (([name], True) if found else ([], False))
