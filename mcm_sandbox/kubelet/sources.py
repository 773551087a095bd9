"""Where the kubelet simulator finds its VMs: one interface, so that everything else the kubelet
does (registration, heartbeats, node-lifecycle, pods, volumes) is the same for every cloud.

A source answers four questions: what time it is, which VMs exist and are not being deleted
(oldest first, so that of two VMs claiming one Node name the older keeps it), whether a Node
belongs to one of its VMs (node-lifecycle only marks its own nodes Unknown), and where to remember
that a VM's Node was registered (a kubelet registers once per VM, so a Node deleted by hand stays
deleted).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mcm_sandbox.kubelet import node as kn
from providers.local.cloud import Follower, LocalCloud


class VMSource(Protocol):
    def clock(self) -> float: ...

    def live_vms(self) -> Sequence[kn.KubeletVM]: ...

    def owns(self, node: dict[str, Any]) -> bool: ...

    def mark_registered(self, vm_id: str, when: float) -> None: ...


class LocalSource:
    """The local cloud's VMs, kept in Redis by the local driver."""

    def __init__(self, cloud: LocalCloud) -> None:
        self.cloud = cloud
        #: every VM, kept current by the cloud's change feed (``LocalCloud.follow``)
        self._follower = Follower()

    def clock(self) -> float:
        return self.cloud.clock()

    def live_vms(self) -> Sequence[kn.KubeletVM]:
        return [vm for vm in self.cloud.follow(self._follower) if vm.live()]

    def owns(self, node: dict[str, Any]) -> bool:
        return kn.is_local_node(node)

    def mark_registered(self, vm_id: str, when: float) -> None:
        self.cloud.mark_registered(vm_id, when)


class CombinedSource:
    """Several clouds played by one kubelet process (the sandbox with local and AWS classes).
    Every source's clock is wall time, so the first one's is everyone's."""

    def __init__(self, sources: Sequence[VMSource]) -> None:
        if not sources:
            raise ValueError("at least one VM source is needed")
        self.sources = list(sources)
        self._source_of: dict[str, VMSource] = {}

    def clock(self) -> float:
        return self.sources[0].clock()

    def live_vms(self) -> Sequence[kn.KubeletVM]:
        out: list[kn.KubeletVM] = []
        source_of: dict[str, VMSource] = {}
        for source in self.sources:
            for vm in source.live_vms():
                out.append(vm)
                source_of[vm.id] = source
        self._source_of = source_of
        return out

    def owns(self, node: dict[str, Any]) -> bool:
        return any(source.owns(node) for source in self.sources)

    def mark_registered(self, vm_id: str, when: float) -> None:
        source = self._source_of.get(vm_id)
        if source is not None:
            source.mark_registered(vm_id, when)


def as_source(cloud: VMSource | LocalCloud) -> VMSource:
    """Callers may still hand the simulator a bare LocalCloud."""
    return LocalSource(cloud) if isinstance(cloud, LocalCloud) else cloud
