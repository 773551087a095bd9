"""A rival holder of the upstream MCM leases, as a Go MCM would hold them; used by the lease tests
and the Gardener end-to-end test."""

from __future__ import annotations

import contextlib
import threading
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from informers.leader import micro_time
from mcm_sandbox.procs import wait_until
from mcm_tasks import kinds
from mcm_tasks.kube import ops, rest


class Rival:
    """A Go MCM holding one Lease: renews it every ``every`` seconds until stopped (it then neither
    renews nor releases, as a killed pod)."""

    def __init__(
        self, api: ApiClient, namespace: str, name: str, duration: int = 2, every: float = 0.3
    ) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.duration, self.every = duration, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def write(self) -> None:
        now = micro_time(datetime.now(UTC))
        spec = {"holderIdentity": "go-mcm", "leaseDurationSeconds": self.duration, "acquireTime": now,
                "renewTime": now}  # fmt: skip
        lease: dict[str, Any] | None = ops.get(
            self.api, kinds.LEASE.resource, self.name, self.namespace, missing_ok=True
        )
        if lease is None:
            meta = {"name": self.name, "namespace": self.namespace}
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}
            rest.request(self.api, "POST", kinds.LEASE.resource.path(self.namespace), body=body)
        else:
            path = kinds.LEASE.resource.path(self.namespace, self.name)
            rest.request(self.api, "PUT", path, body={**lease, "spec": {**lease["spec"], **spec}})

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            with contextlib.suppress(Exception):  # a conflict with ours: the next round writes again
                self.write()

    def __enter__(self) -> Rival:
        def written() -> bool:
            try:
                self.write()
            except ApiException as err:  # a renewal of ours came between our read and write
                if err.status != 409:
                    raise
                return False
            return True

        wait_until(written, 10, interval=0.1, what=f"{self.name} written by the rival")
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
