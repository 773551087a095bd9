"""What the clusters show, from watches: the ``Tracker`` follows every event of both sandbox API
servers from the start of a benchmark. Waiting then needs no polling LISTs (which would load the
servers being measured), the largest machine count is seen at every instant, and each write is
attributed to a resource and to the part of the object it changed (``updates_by_part``; Events by
reason).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.kube import errors, ops
from mcm_tasks.kube.resources import Resource

WATCHED: dict[str, tuple[Resource, ...]] = {
    "control": (
        kinds.MACHINE.resource,
        kinds.MACHINE_SET.resource,
        kinds.MACHINE_DEPLOYMENT.resource,
        kinds.MACHINE_CLASS.resource,
        kinds.SECRET.resource,
        kinds.EVENT.resource,
        kinds.LEASE.resource,
    ),
    "target": (
        kinds.NODE.resource,
        kinds.POD.resource,
        kinds.EVENT.resource,
        kinds.LEASE.resource,
        kinds.VOLUME_ATTACHMENT.resource,
    ),
}
#: kinds whose updates are split by the part of the object they changed
DIFFED = {"machines", "nodes", "machinesets", "machinedeployments"}
META_PARTS = ("labels", "annotations", "finalizers", "deletionTimestamp", "ownerReferences", "generation")


def _changed_parts(old: dict[str, Any], new: dict[str, Any]) -> str:
    parts = [k for k in sorted(set(old) | set(new)) if k not in ("metadata", "apiVersion", "kind")]
    changed = [k for k in parts if old.get(k) != new.get(k)]
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    changed += [f"metadata.{k}" for k in META_PARTS if om.get(k) != nm.get(k)]
    return "+".join(changed) or "other"


def phase_of(machine: dict[str, Any]) -> str:
    return str(((machine.get("status") or {}).get("currentStatus") or {}).get("phase") or "")


class Tracker:
    """Every event of both servers since the start: counts, and the live machines, nodes and pods."""

    def __init__(
        self, apis: dict[str, ApiClient], watched: dict[str, tuple[Resource, ...]] | None = None
    ) -> None:
        """``watched``: the resources to follow per server (default ``WATCHED``: both servers')."""
        self.apis = apis
        self.cond = threading.Condition()
        self.events: Counter[str] = Counter()
        self.parts: Counter[str] = Counter()
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self.times: dict[str, dict[str, float]] = {}
        self.deleting: set[str] = set()
        self.max_total = 0
        self.max_active = 0
        self.relists = 0
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(server, res), daemon=True)
            for server, resources in (WATCHED if watched is None else watched).items()
            for res in resources
        ]
        self._started = threading.Barrier(len(self.threads) + 1)

    def start(self) -> Tracker:
        for thread in self.threads:
            thread.start()
        self._started.wait(60)
        return self

    def close(self) -> None:
        self.stop.set()

    def machines(self) -> list[dict[str, Any]]:
        return list(self.objects.get("control/machines", {}).values())

    def count(self, key: str) -> int:
        return len(self.objects.get(key, {}))

    def _list(self, server: str, res: Resource, key: str) -> str:
        listed = ops.list_(self.apis[server], res, all_namespaces=True)
        with self.cond:
            self.objects[key] = {
                (o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in listed["items"]
            }
            if key == "control/machines":
                metas = [m["metadata"] for m in listed["items"]]
                self.deleting = {m["name"] for m in metas if m.get("deletionTimestamp")}
                self._observe()
        return str(listed["metadata"]["resourceVersion"])

    def _run(self, server: str, res: Resource) -> None:
        key = f"{server}/{res.plural}"
        rv = self._list(server, res, key)
        self._started.wait(60)
        while not self.stop.is_set():
            try:
                for kind, obj in ops.watch(
                    self.apis[server], res, all_namespaces=True, resource_version=rv,
                    timeout_seconds=120, read_timeout=60,
                ):  # fmt: skip
                    rv = str(obj.get("metadata", {}).get("resourceVersion") or rv)
                    if kind != "BOOKMARK":
                        self._apply(key, kind, obj)
            except Exception as err:
                if self.stop.is_set():
                    return
                if errors.is_gone(err):  # fell out of the history window: events were missed
                    self.relists += 1
                    rv = self._list(server, res, key)
                else:
                    time.sleep(0.2)

    def _apply(self, key: str, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        name = (meta.get("namespace", ""), meta["name"])
        with self.cond:
            store = self.objects.setdefault(key, {})
            self.events[f"{key} {kind}"] += 1
            if key.endswith("/events") and kind != "DELETED":
                # which Events: created (ADDED) or folded into a repeat (MODIFIED), by reason
                self.parts[f"{key} {kind} {obj.get('reason') or ''}"] += 1
            if kind == "DELETED":
                store.pop(name, None)
            else:
                old = store.get(name)
                if kind == "MODIFIED" and old is not None and key.split("/")[1] in DIFFED:
                    self.parts[f"{key} {_changed_parts(old, obj)}"] += 1
                store[name] = obj
            if key == "control/machines":
                self._lifecycle(kind, obj)
                self._observe()

    def _lifecycle(self, kind: str, machine: dict[str, Any]) -> None:
        """When each machine was first seen, Running, marked for deletion and gone (wall clock)."""
        times = self.times.setdefault(machine["metadata"].get("uid", ""), {})
        now = time.time()
        times.setdefault("added", now)
        if phase_of(machine) == "Running":
            times.setdefault("running", now)
        if machine["metadata"].get("deletionTimestamp"):
            times.setdefault("deleting", now)
            self.deleting.add(machine["metadata"]["name"])
        if kind == "DELETED":
            times.setdefault("gone", now)
            self.deleting.discard(machine["metadata"]["name"])

    def _observe(self) -> None:
        total = len(self.objects.get("control/machines", {}))
        self.max_total = max(self.max_total, total)
        self.max_active = max(self.max_active, total - len(self.deleting))

    def latencies(self, start: float, end: float) -> dict[str, dict[str, float]]:
        """Per-machine seconds from creation to Running and from deletion to gone, within a phase."""
        spans: dict[str, list[float]] = {"create_to_running": [], "delete_to_gone": []}
        with self.cond:
            for t in self.times.values():
                if start <= t["added"] and t.get("running", end + 1) <= end:
                    spans["create_to_running"].append(t["running"] - t["added"])
                if start <= t.get("deleting", start - 1) and t.get("gone", end + 1) <= end:
                    spans["delete_to_gone"].append(t["gone"] - t["deleting"])
        return {what: _quantiles(values) for what, values in spans.items() if values}

    def wait(self, done: Callable[[], bool], timeout: float, what: str, show: Callable[[], str]) -> float:
        """Block until ``done()`` (checked under the lock every 0.1 s); prints progress every 10 s."""
        start = time.monotonic()
        deadline, next_show = start + timeout, start + 10
        with self.cond:
            while not done():
                now = time.monotonic()
                if now > deadline:
                    raise TimeoutError(f"{what}: not done after {timeout:.0f}s ({show()})")
                if now > next_show:
                    print(f"  … {now - start:5.0f}s {what}: {show()}", flush=True)
                    next_show = now + 10
                self.cond.wait(0.1)  # the watch threads keep going meanwhile; 0.1 s resolution
        return time.monotonic() - start

    def reset_peaks(self) -> None:
        with self.cond:
            self.max_total = self.max_active = 0
            self._observe()


def _quantiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)

    def pick(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))], 2)

    return {"count": len(values), "p50": pick(0.5), "p90": pick(0.9), "max": pick(1.0)}


def machine_summary(tracker: Tracker) -> str:
    machines = tracker.machines()
    phases = Counter(phase_of(m) or "(none)" for m in machines)
    deleting = sum(1 for m in machines if m["metadata"].get("deletionTimestamp"))
    shown = ", ".join(f"{p} {n}" for p, n in sorted(phases.items()))
    return f"{len(machines)} machines ({shown}; {deleting} deleting), {tracker.count('target/nodes')} nodes"
