"""One kubelet-simulator process for many target clusters: a seed's shoots on two cores.

In seed mode (issue 33) every shoot namespace of the control cluster has a target cluster of its own;
the sandbox serves them as virtual clusters of one API-server process
(:mod:`mcm_sandbox.apiserver.clusters`), and this module plays the kubelets of all of them from
one process. A VM belongs to the target cluster of its Machine's namespace (the local cloud records
it, ``LocalVM.namespace``); a VM of a namespace without a cluster of its own (or one that records no
namespace, an EC2 instance) goes to the default cluster, when there is one, else nowhere.

Each cluster gets a :class:`~mcm_sandbox.kubelet.simulator.KubeletSimulator` of its own (its
watches, its node-lifecycle clock, its volume bookkeeping) fed only its VMs, ticking in a thread of
its own, so a cluster whose API server hangs or fails holds up only its own Nodes (a target API
server down freezes only its namespace, as with a kubelet per node). One coordinating loop reads
the clouds once per round for all clusters and hands each its share, so a hundred idle clusters
cost a hundred sets of watches and threads and no more cloud reads than one. With a clusters folder
(``<namespace>.kubeconfig`` files, as ``sandbox apiserver`` writes its virtual clusters') clusters
added, removed or made again while running are followed within ``rescan`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient

from mcm_sandbox.kubelet import node as kn
from mcm_sandbox.kubelet.simulator import KubeletSimulator
from mcm_sandbox.kubelet.sources import VMSource
from mcm_sandbox.kubelet.watch import WatchedLists

log = logging.getLogger("mcm_sandbox.kubelet.clusters")

#: the key of the cluster that takes the VMs of namespaces without a cluster of their own
DEFAULT = ""
KUBECONFIG_SUFFIX = ".kubeconfig"


def namespace_of(vm: kn.KubeletVM) -> str:
    """The control-cluster namespace of the Machine a VM was made for ("" when the cloud does not
    record one)."""
    return str(getattr(vm, "namespace", "") or "")


def cluster_for(namespace: str, clusters: Mapping[str, Any]) -> str | None:
    """Which cluster's kubelet plays a VM of ``namespace``: its own, else the default, else none."""
    if namespace and namespace in clusters:
        return namespace
    return DEFAULT if DEFAULT in clusters else None


def clusters_in(folder: Path) -> dict[str, Path]:
    """``<namespace>.kubeconfig`` files of a clusters folder, by namespace (a missing folder: none)."""
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return {}
    return {
        p.name.removesuffix(KUBECONFIG_SUFFIX): p
        for p in entries
        if p.name.endswith(KUBECONFIG_SUFFIX) and not p.name.startswith(".")
    }


class SharedVMs:
    """The clouds' VMs read once per round and split by cluster, each cluster's share handed to its
    simulator as a :class:`VMSource`."""

    def __init__(self, source: VMSource) -> None:
        self.source = source
        self._by_cluster: dict[str, list[kn.KubeletVM]] = {}
        #: when the VMs in hand started being read (monotonic): a tick that ended before it has its
        #: registrations in them (``ClusterKubelet.tick``)
        self.read_at = float("-inf")

    def refresh(self, route: Callable[[kn.KubeletVM], str | None]) -> None:
        started = time.monotonic()
        by_cluster: dict[str, list[kn.KubeletVM]] = {}
        for vm in self.source.live_vms():  # oldest first, kept so in every share
            key = route(vm)
            if key is not None:
                by_cluster.setdefault(key, []).append(vm)
        self._by_cluster = by_cluster
        self.read_at = started

    def view(self, key: str) -> VMSource:
        return _View(self, key)


class _View:
    """One cluster's share of the VMs (the :class:`VMSource` its simulator reads)."""

    def __init__(self, shared: SharedVMs, key: str) -> None:
        self.shared = shared
        self.key = key

    def clock(self) -> float:
        return self.shared.source.clock()

    def live_vms(self) -> Sequence[kn.KubeletVM]:
        return self.shared._by_cluster.get(self.key, [])

    def owns(self, node: dict[str, Any]) -> bool:
        return self.shared.source.owns(node)

    def mark_registered(self, vm_id: str, when: float) -> None:
        self.shared.source.mark_registered(vm_id, when)


@dataclass
class ClusterKubelet:
    """The kubelets of one target cluster."""

    key: str
    api: ApiClient
    sim: KubeletSimulator
    watched: WatchedLists | None
    #: the clusters folder's file it was loaded from, and that file's mtime (a rewritten file: the
    #: cluster was made again, with another token); None for a cluster given by flag
    loaded_from: tuple[Path, int] | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    #: the VMs all clusters share; a tick waits for a read of them that began after its last tick
    shared: SharedVMs | None = None
    #: when its last tick ended (monotonic)
    ticked_at: float = float("-inf")

    def fresh(self) -> bool:
        """Whether the shared VMs were read after this cluster's last tick ended. A tick on an older
        read would not see the registrations its last tick made (a VM's ``registered_at``) and would
        register those Nodes again, even after MCM deleted them with their VMs."""
        return self.shared is None or self.shared.read_at >= self.ticked_at

    def tick(self) -> dict[str, int] | None:
        """One tick once its watches have listed (None before: it would see an empty cluster) and on
        VMs read since its last tick (``fresh``); a failure is logged, never raised: the next tick
        tries again."""
        if self.watched is not None and not self.watched.synced():
            return None
        if not self.fresh():
            return None
        try:
            return self.sim.tick()
        except Exception as err:  # its API server down or restarting must not end it
            log.warning("kubelet tick of %s failed: %s: %s", self.key or "default", type(err).__name__, err)
            return None
        finally:
            self.ticked_at = time.monotonic()

    def start(self, interval: float) -> None:
        def loop() -> None:
            while not self.stopping.is_set():
                started = time.monotonic()
                if not self.fresh():  # the next read of the VMs is at most an interval away
                    self.stopping.wait(min(interval, 0.05))
                    continue
                done = self.tick()
                if done:
                    summary = ", ".join(f"{k}={v}" for k, v in sorted(done.items()))
                    log.info("tick %s: %s", self.key or "default", summary)
                self.stopping.wait(max(interval - (time.monotonic() - started), 0.01))

        self.thread = threading.Thread(target=loop, name=f"kubelet-{self.key or 'default'}", daemon=True)
        self.thread.start()

    def stop(self, deadline: float | None = None) -> None:
        """Stop ticking and watching; waits for the tick thread until ``deadline`` (monotonic; default
        10 s from now): a tick blocked on a slow API server is left to its daemon thread."""
        self.stopping.set()
        deadline = time.monotonic() + 10.0 if deadline is None else deadline
        if self.thread is not None:
            self.thread.join(max(deadline - time.monotonic(), 0.0))
        if self.watched is not None:
            self.watched.stop(deadline)
        self.api.close()


@dataclass
class MultiClusterKubelet:
    """Kubelet simulators for several target clusters, ticked in turn from one thread.

    ``connect`` makes a cluster's client from its kubeconfig path (the CLI: the official client's
    loader); ``watch`` reads through watches (the CLI) instead of a list per tick (tests that tick by
    hand); ``sim_options`` are :class:`KubeletSimulator`'s keyword arguments.
    """

    source: VMSource
    connect: Callable[[Path], ApiClient]
    watch: bool = True
    sim_options: dict[str, Any] = field(default_factory=dict)
    clusters: dict[str, ClusterKubelet] = field(default_factory=dict)
    #: seconds between a cluster's ticks once ``run`` started it (``run`` sets it)
    interval: float | None = None

    def __post_init__(self) -> None:
        self.shared = SharedVMs(self.source)

    def add(self, key: str, kubeconfig: Path, from_folder: bool = False) -> ClusterKubelet:
        """Play the kubelets of namespace ``key``'s VMs (``DEFAULT``: every VM no other cluster takes)
        against the cluster of ``kubeconfig``."""
        mtime = kubeconfig.stat().st_mtime_ns if from_folder else 0
        api = self.connect(kubeconfig)
        watched = WatchedLists(api) if self.watch else None
        sim = KubeletSimulator(api, self.shared.view(key), watched=watched, **self.sim_options)
        cluster = ClusterKubelet(
            key, api, sim, watched, (kubeconfig, mtime) if from_folder else None, shared=self.shared
        )
        self.clusters[key] = cluster
        if watched is not None:
            watched.start()
        if self.interval is not None:
            cluster.start(self.interval)
        log.info("kubelets of %s: cluster %s", f"namespace {key}" if key else "other namespaces", kubeconfig)
        return cluster

    def remove(self, key: str, deadline: float | None = None) -> None:
        cluster = self.clusters.pop(key, None)
        if cluster is not None:
            cluster.stop(deadline)
            log.info("kubelets of namespace %s: stopped", key)

    def sync_folder(self, folder: Path) -> None:
        """Follow a clusters folder: a new ``<namespace>.kubeconfig`` adds that cluster, a removed one
        stops it, a rewritten one connects again (clusters given by flag stay as they are)."""
        found = clusters_in(folder)
        for key, cluster in list(self.clusters.items()):
            if cluster.loaded_from is None:
                continue
            path, mtime = cluster.loaded_from
            if key not in found or _mtime(path) != mtime:
                self.remove(key)
        for key, path in sorted(found.items()):
            if key not in self.clusters:
                try:
                    self.add(key, path, from_folder=True)
                except Exception as err:  # a half-written or broken file: the next scan tries again
                    log.warning("cluster %s: cannot load %s: %s", key, path, err)

    def refresh(self) -> None:
        """Read the clouds once and give each cluster its share of the VMs."""
        self.shared.refresh(lambda vm: cluster_for(namespace_of(vm), self.clusters))

    def tick(self) -> dict[str, dict[str, int]]:
        """One round by hand (tests): the clouds read once, then each synced cluster's tick in turn;
        what each did."""
        self.refresh()
        done: dict[str, dict[str, int]] = {}
        for key, cluster in list(self.clusters.items()):
            result = cluster.tick()
            if result is not None:
                done[key] = result
        return done

    def run(
        self, stop: threading.Event, interval: float = 0.5, folder: Path | None = None, rescan: float = 2.0
    ) -> None:
        """Start every cluster's ticking thread (and those added later), then read the clouds every
        ``interval`` and follow ``folder`` every ``rescan`` seconds until ``stop``."""
        self.interval = interval
        self.refresh()
        for cluster in self.clusters.values():
            cluster.start(interval)
        scanned = float("-inf")
        while not stop.is_set():
            started = time.monotonic()
            try:
                if folder is not None and started - scanned >= rescan:
                    self.sync_folder(folder)
                    scanned = started
                self.refresh()
            except Exception as err:  # the cloud's Redis restarting must not end the simulator
                log.warning("kubelet round failed: %s: %s", type(err).__name__, err)
            stop.wait(max(interval - (time.monotonic() - started), 0.01))

    def close(self, deadline: float | None = None) -> None:
        """Stop every cluster: all are told first, then each is waited for until ``deadline``
        (monotonic), so N clusters stop in the time of the slowest, not of their sum."""
        for cluster in self.clusters.values():
            cluster.stopping.set()
        for key in list(self.clusters):
            self.remove(key, deadline)


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None
