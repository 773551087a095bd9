"""The adaptive creation timeout end to end in the sandbox (issue 29, MCM #1155): a provider whose VMs
join in 5 s against a declared creation timeout of 4 s (the issue's 25 s against 20 s, compressed).
With a fixed timeout MCM creates and terminates machines for ever; here the deployment's
``effective-creation-timeout`` steps up (a quarter of the declared timeout at a time, with an Event)
until its machines join, and stays below the ceiling (twice the declared timeout)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION, Machine
from mcm_tasks.api.constants import EFFECTIVE_CREATION_TIMEOUT_ANNOTATION
from mcm_tasks.controllers.common.creation_timeout import RAISED
from mcm_tasks.durations import parse_duration
from mcm_tasks.kube import ops
from tests.e2e.support import connected, local_class, running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

NS = "default"
POOL = "slow"
DECLARED = 4.0
ENV = {
    "MCM_LONG_RETRY": "10s",
    "MCM_CLASS_RESYNC_PERIOD": "10s",
    "MCM_MACHINE_DRAIN_TIMEOUT": "5s",
    "MCM_MACHINE_CREATION_TIMEOUT": f"{DECLARED:g}s",
}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(Path(tmp_path_factory.mktemp("adaptive-e2e")), ENV, with_beat=False) as started:
        yield started


def test_a_slow_provider_raises_the_effective_timeout_until_machines_join(sandbox: Sandbox) -> None:
    with connected(sandbox) as (control, _target, _client):
        local_class(control, "slow-class", {"bootDelaySeconds": 5.0}, NS)
        labels = {"pool": POOL, "name": POOL}
        ops.create(
            control,
            kinds.MACHINE_DEPLOYMENT.resource,
            {
                "apiVersion": API_VERSION,
                "kind": "MachineDeployment",
                "metadata": {"name": POOL, "namespace": NS},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"pool": POOL}},
                    "strategy": {
                        "type": "RollingUpdate",
                        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
                    },
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"class": {"kind": "MachineClass", "name": "slow-class"}},
                    },
                },
            },
        )

        def effective() -> float:
            found = ops.get(control, kinds.MACHINE_DEPLOYMENT.resource, POOL, NS) or {}
            raw = ((found.get("metadata") or {}).get("annotations") or {}).get(
                EFFECTIVE_CREATION_TIMEOUT_ANNOTATION
            )
            return parse_duration(raw) if raw else DECLARED

        def running() -> list[Machine]:
            items = ops.list_(control, kinds.MACHINE.resource, NS, label_selector=f"pool={POOL}")["items"]
            return [
                m
                for m in (Machine.model_validate(i) for i in items)
                if m.status.current_status.phase == "Running" and not m.metadata.is_deleting
            ]

        wait_until(lambda: effective() > DECLARED, 60, interval=0.3, what="the effective timeout raised")
        wait_until(lambda: len(running()) == 2, 180, interval=0.3, what="2 machines joined")
        value = effective()
        assert DECLARED < value <= 2 * DECLARED
        # machines created with a raised timeout joined (one of the first generation may also have
        # joined, if its deadline check ran late on a loaded machine: the timer is exact only to a pass)
        raised = [
            m
            for m in running()
            if parse_duration(m.metadata.annotations.get(EFFECTIVE_CREATION_TIMEOUT_ANNOTATION, "0s"))
            > DECLARED
        ]
        assert raised
        events = [
            e
            for e in ops.list_(control, kinds.EVENT.resource, NS)["items"]
            if e.get("reason") == RAISED and (e.get("involvedObject") or {}).get("name") == POOL
        ]
        assert events
        assert "did not join within 4s" in " ".join(str(e.get("message")) for e in events)
