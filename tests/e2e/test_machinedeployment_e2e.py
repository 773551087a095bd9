"""End to end in the sandbox (``mcm_sandbox.runner.up``) with real worker processes, the
informer and the kubelet simulator: a MachineDeployment scaled 0 → 1 → 6 → 2; a RollingUpdate of 10
machines to a new class watched by an observer that checks the surge and availability budgets the
whole time; deleting the deployment leaves no machine, VM or Node."""

from __future__ import annotations

import base64
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes.client import ApiClient

from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.api.constants import DESIRED_REPLICAS_ANNOTATION
from mcm_tasks.kube import ops
from providers.local import LocalCloud
from tests.e2e.support import connected, running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
Clients = tuple[ApiClient, ApiClient, redis.Redis]

NS = "default"
WAIT = 120.0
#: compressed time; every process serves all reconcilers (the registry's default module)
ENV = {
    "MCM_LONG_RETRY": "10s",
    "MCM_RESOURCE_EXHAUSTED_RETRY": "10s",
    "MCM_CLASS_RESYNC_PERIOD": "10s",
    "MCM_MACHINE_DRAIN_TIMEOUT": "30s",
    # a killed worker's locks and unacknowledged messages come back soon
    "MCM_RECONCILE_LOCK_TTL": "5s",
    "MCM_VISIBILITY_TIMEOUT": "30s",
}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(Path(tmp_path_factory.mktemp("mcd-e2e")), ENV, with_beat=False) as started:
        yield started


@pytest.fixture(scope="module")
def clients(sandbox: Sandbox) -> Iterator[Clients]:
    with connected(sandbox) as made:
        yield _with_classes(made)


def _with_classes(made: Clients) -> Clients:
    """The pool's secret and the three classes the tests roll between."""
    control, _, _ = made
    user_data = base64.b64encode(b"#!/bin/sh\necho <<MACHINE_NAME>>\n").decode()
    ops.create(
        control,
        kinds.SECRET.resource,
        {"metadata": {"name": "mcd-secret", "namespace": NS}, "data": {"userData": user_data}},
    )
    for name, spec in (
        ("class-a", {"bootDelaySeconds": 0.5}),
        ("class-b", {"bootDelaySeconds": 0.5}),
        ("class-never", {"neverJoin": True}),
    ):
        ops.create(
            control,
            kinds.MACHINE_CLASS.resource,
            {
                "apiVersion": API_VERSION,
                "kind": "MachineClass",
                "metadata": {"name": name, "namespace": NS},
                "provider": "local",
                "providerSpec": spec,
                "secretRef": {"name": "mcd-secret", "namespace": NS},
            },
        )
    return made


def deployment(
    name: str, replicas: int, class_name: str = "class-a", strategy: str = "RollingUpdate", **spec: Any
) -> dict[str, Any]:
    labels = {"pool": name}
    rolling = {"rollingUpdate": {"maxSurge": 2, "maxUnavailable": 1}} if strategy == "RollingUpdate" else {}
    return {
        "apiVersion": API_VERSION,
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {"type": strategy, **rolling},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"class": {"kind": "MachineClass", "name": class_name}},
            },
            **spec,
        },
    }


def machines(api: ApiClient, pool: str) -> list[dict[str, Any]]:
    items = ops.list_(api, kinds.MACHINE.resource, NS, label_selector=f"pool={pool}")["items"]
    return list(items)


def _running(machine: dict[str, Any]) -> bool:
    phase = ((machine.get("status") or {}).get("currentStatus") or {}).get("phase")
    return phase == "Running" and not machine["metadata"].get("deletionTimestamp")


def live_vms(client: redis.Redis, pool: str) -> int:
    """The pool's VMs (machine names start with ``<pool>-<hash>-``)."""
    return sum(1 for vm in LocalCloud(client).all() if vm.live() and vm.machine.startswith(f"{pool}-"))


def nodes(api: ApiClient, pool: str) -> int:
    return sum(
        1
        for n in ops.list_(api, kinds.NODE.resource)["items"]
        if n["metadata"]["name"].startswith(f"{pool}-")
    )


def status(api: ApiClient, name: str) -> dict[str, Any]:
    return dict((ops.get(api, kinds.MACHINE_DEPLOYMENT.resource, name, NS) or {}).get("status") or {})


def converged(control: ApiClient, target: ApiClient, client: redis.Redis, pool: str, n: int) -> bool:
    found = machines(control, pool)
    s = status(control, pool)
    return (
        len(found) == n
        and sum(map(_running, found)) == n
        and nodes(target, pool) == n
        and live_vms(client, pool) == n
        and s.get("availableReplicas", 0) == n
        and s.get("updatedReplicas", 0) == n
    )


def test_deployment_scales_0_1_6_2_and_deletion_cleans_up(
    clients: tuple[ApiClient, ApiClient, redis.Redis],
) -> None:
    control, target, client = clients
    ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, deployment("scale", 0))
    for replicas in (1, 6, 2):
        ops.patch(
            control,
            kinds.MACHINE_DEPLOYMENT.resource,
            "scale",
            {"spec": {"replicas": replicas}},
            NS,
            subresource="scale",
        )
        wait_until(
            lambda n=replicas: converged(control, target, client, "scale", n),  # type: ignore[misc]
            WAIT,
            what=f"{replicas} machines Running with VMs and Nodes",
        )
    ops.delete(control, kinds.MACHINE_DEPLOYMENT.resource, "scale", NS)
    wait_until(
        lambda: (
            ops.get(control, kinds.MACHINE_DEPLOYMENT.resource, "scale", NS, missing_ok=True) is None
            and not ops.list_(control, kinds.MACHINE_SET.resource, NS)["items"]
            and not machines(control, "scale")
            and nodes(target, "scale") == 0
            and live_vms(client, "scale") == 0
        ),
        WAIT,
        what="the deployment, its sets, machines, VMs and Nodes gone",
    )


class Observer(threading.Thread):
    """Watches the pool's machines the whole time and records every budget violation."""

    def __init__(self, api: ApiClient, pool: str, total_limit: int, min_available: int) -> None:
        super().__init__(daemon=True)
        self.api, self.pool = api, pool
        self.total_limit, self.min_available = total_limit, min_available
        self.stop = threading.Event()
        self.violations: list[str] = []
        self.max_total = 0
        self.min_seen = 1 << 30
        self.samples = 0

    def run(self) -> None:
        while not self.stop.is_set():
            found = machines(self.api, self.pool)
            total, available = len(found), sum(map(_running, found))
            self.samples += 1
            self.max_total = max(self.max_total, total)
            self.min_seen = min(self.min_seen, available)
            if total > self.total_limit or available < self.min_available:
                self.violations.append(f"{total} machines, {available} available")
            self.stop.wait(0.05)


def roll_to(control: ApiClient, pool: str, class_name: str) -> None:
    body = {"spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": class_name}}}}}
    ops.patch(control, kinds.MACHINE_DEPLOYMENT.resource, pool, body, NS)


def rolled_out(clients: Clients, pool: str, class_name: str, replicas: int = 10) -> bool:
    control, target, client = clients
    found = machines(control, pool)
    s = status(control, pool)
    return (
        converged(control, target, client, pool, replicas)
        and all(m["spec"]["class"]["name"] == class_name for m in found)
        and any(c.get("reason") == "NewMachineSetAvailable" for c in s.get("conditions") or [])
    )


def check_observer(observer: Observer) -> None:
    seen = f"{observer.samples} samples, max {observer.max_total} machines, min {observer.min_seen} available"
    assert observer.violations == [], seen
    assert observer.samples > 10 and observer.max_total == 12 and observer.min_seen >= 9, seen


def test_rolling_update_keeps_budgets_throughout(clients: tuple[ApiClient, ApiClient, redis.Redis]) -> None:
    control, target, client = clients
    ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, deployment("roll", 10))
    wait_until(lambda: converged(control, target, client, "roll", 10), WAIT, what="10 machines of class-a")
    observer = Observer(control, "roll", total_limit=12, min_available=9)
    observer.start()
    try:
        roll_to(control, "roll", "class-b")
        wait_until(
            lambda: rolled_out(clients, "roll", "class-b"), WAIT * 2, interval=0.5, what="class-b rolled out"
        )
    finally:
        observer.stop.set()
        observer.join(10)
    check_observer(observer)
    sets = [
        s
        for s in ops.list_(control, kinds.MACHINE_SET.resource, NS)["items"]
        if s["metadata"]["name"].startswith("roll-")
    ]
    sizes = sorted((s["spec"]["replicas"], (s.get("status") or {}).get("replicas", 0)) for s in sets)
    assert sizes == [(0, 0), (10, 10)]


def _progressing(control: ApiClient, pool: str) -> tuple[str, str]:
    conditions: list[dict[str, Any]] = status(control, pool).get("conditions") or []
    cond = next((c for c in conditions if c.get("type") == "Progressing"), {})
    return str(cond.get("status", "")), str(cond.get("reason", ""))


def test_recreate_never_runs_old_and_new_machines_together(clients: Clients) -> None:
    control, target, client = clients
    ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, deployment("rec", 3, strategy="Recreate"))
    wait_until(lambda: converged(control, target, client, "rec", 3), WAIT, what="3 machines of class-a")
    mixed: list[set[str]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            classes = {m["spec"]["class"]["name"] for m in machines(control, "rec")}
            if len(classes) > 1:
                mixed.append(classes)
            stop.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        roll_to(control, "rec", "class-b")
        wait_until(
            lambda: rolled_out(clients, "rec", "class-b", 3), WAIT, interval=0.5, what="class-b recreated"
        )
    finally:
        stop.set()
        watcher.join(10)
    assert mixed == []


def test_pause_scale_resume_then_rollback(clients: Clients) -> None:
    control, target, client = clients
    ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, deployment("life", 3))
    wait_until(lambda: converged(control, target, client, "life", 3), WAIT, what="3 machines of class-a")
    body = {
        "spec": {"paused": True, "template": {"spec": {"class": {"kind": "MachineClass", "name": "class-b"}}}}
    }
    ops.patch(control, kinds.MACHINE_DEPLOYMENT.resource, "life", body, NS)
    wait_until(lambda: _progressing(control, "life") == ("Unknown", "DeploymentPaused"), WAIT, what="paused")
    ops.patch(
        control, kinds.MACHINE_DEPLOYMENT.resource, "life", {"spec": {"replicas": 4}}, NS, subresource="scale"
    )
    wait_until(
        lambda: sum(map(_running, machines(control, "life"))) == 4, WAIT, what="4 machines while paused"
    )
    assert all(m["spec"]["class"]["name"] == "class-a" for m in machines(control, "life"))
    ops.patch(control, kinds.MACHINE_DEPLOYMENT.resource, "life", {"spec": {"paused": False}}, NS)
    wait_until(
        lambda: rolled_out(clients, "life", "class-b", 4), WAIT, interval=0.5, what="resumed to class-b"
    )
    ops.patch(
        control, kinds.MACHINE_DEPLOYMENT.resource, "life", {"spec": {"rollbackTo": {"revision": 0}}}, NS
    )
    wait_until(
        lambda: rolled_out(clients, "life", "class-a", 4), WAIT, interval=0.5, what="rolled back to class-a"
    )
    d = ops.get(control, kinds.MACHINE_DEPLOYMENT.resource, "life", NS) or {}
    assert "rollbackTo" not in d["spec"]


def test_trigger_deletion_deletes_the_named_machine(clients: Clients) -> None:
    control, target, client = clients
    ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, deployment("trig", 3))
    wait_until(lambda: converged(control, target, client, "trig", 3), WAIT, what="3 machines")
    victim = sorted(m["metadata"]["name"] for m in machines(control, "trig"))[1]
    marked = "2024-05-06T07:00:00Z"
    annotations = {
        "node.machine.sapcloud.io/trigger-deletion-by-mcm": f"{victim}~{marked}",
        "machine.sapcloud.io/last-deployment-replica-change-by-scaler-time": "2024-05-06T07:00:01Z",
    }
    ops.patch(
        control,
        kinds.MACHINE_DEPLOYMENT.resource,
        "trig",
        {"metadata": {"annotations": annotations}, "spec": {"replicas": 2}},
        NS,
    )
    wait_until(lambda: converged(control, target, client, "trig", 2), WAIT, what="2 machines left")
    assert victim not in {m["metadata"]["name"] for m in machines(control, "trig")}


def test_progress_deadline_exceeded_when_machines_never_join(clients: Clients) -> None:
    control, target, client = clients
    body = deployment("stuck", 2, progressDeadlineSeconds=3)
    body["spec"]["strategy"]["rollingUpdate"] = {"maxSurge": 1, "maxUnavailable": 0}
    ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, body)
    wait_until(lambda: converged(control, target, client, "stuck", 2), WAIT, what="2 machines of class-a")
    roll_to(control, "stuck", "class-never")
    wait_until(
        lambda: _progressing(control, "stuck") == ("False", "ProgressDeadlineExceeded"), WAIT, what="deadline"
    )
    running = [m for m in machines(control, "stuck") if _running(m)]
    assert len(running) == 2 and all(m["spec"]["class"]["name"] == "class-a" for m in running)


def pool_sets(control: ApiClient, pool: str) -> list[dict[str, Any]]:
    items = ops.list_(control, kinds.MACHINE_SET.resource, NS)["items"]
    return [s for s in items if s["metadata"]["name"].startswith(f"{pool}-")]


def set_sizes(control: ApiClient, pool: str) -> dict[str, int]:
    """spec.replicas of the pool's sets by their template's class."""
    return {
        s["spec"]["template"]["spec"]["class"]["name"]: int(s["spec"].get("replicas", 0))
        for s in pool_sets(control, pool)
    }


def scale(control: ApiClient, pool: str, replicas: int) -> None:
    ops.patch(
        control,
        kinds.MACHINE_DEPLOYMENT.resource,
        pool,
        {"spec": {"replicas": replicas}},
        NS,
        subresource="scale",
    )


class SetHistory(threading.Thread):
    """Every state the pool's sets pass through, from a watch: a split that the next reconcile changes
    again (the rolling pass trims a new set above replicas) is still seen, however late a poll comes.
    A state maps each set's class to (spec.replicas, desired-replicas annotation)."""

    def __init__(self, api: ApiClient, pool: str) -> None:
        super().__init__(daemon=True)
        self.api, self.pool = api, pool
        self.stop = threading.Event()
        self.states: list[dict[str, tuple[int, str | None]]] = []
        self._sets: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        listed = ops.list_(
            api, kinds.MACHINE_SET.resource, NS
        )  # before start() returns: nothing later is missed
        self._version = listed["metadata"]["resourceVersion"]
        for ms in listed["items"]:
            self._record("ADDED", ms)

    def run(self) -> None:
        version = self._version
        while not self.stop.is_set():
            for type_, obj in ops.watch(
                self.api, kinds.MACHINE_SET.resource, NS, resource_version=version, timeout_seconds=2
            ):
                version = obj["metadata"].get("resourceVersion") or version
                if type_ != "BOOKMARK":
                    self._record(type_, obj)

    def _record(self, type_: str, ms: dict[str, Any]) -> None:
        name = ms["metadata"]["name"]
        if not name.startswith(f"{self.pool}-"):
            return
        if type_ == "DELETED":
            self._sets.pop(name, None)
        else:
            self._sets[name] = ms
        state = {
            s["spec"]["template"]["spec"]["class"]["name"]: (
                int(s["spec"].get("replicas", 0)),
                (s["metadata"].get("annotations") or {}).get(DESIRED_REPLICAS_ANNOTATION),
            )
            for s in self._sets.values()
        }
        with self._lock:
            if not self.states or self.states[-1] != state:
                self.states.append(state)

    def passed(self, replicas: int, sizes: dict[str, int]) -> bool:
        """Whether the sets were ever at ``sizes``, all marked with the deployment's ``replicas``."""
        want = {cls: (n, str(replicas)) for cls, n in sizes.items()}
        with self._lock:
            return want in self.states

    def last(self) -> dict[str, tuple[int, str | None]]:
        with self._lock:
            return self.states[-1] if self.states else {}


def await_split(history: SetHistory, replicas: int, want: dict[str, int]) -> None:
    """Until the sets have passed through the sizes wanted, carrying the deployment's new desired
    replicas."""
    try:
        wait_until(lambda: history.passed(replicas, want), WAIT, what=f"sets at {want}")
    except TimeoutError as err:
        raise AssertionError(f"scaled to {replicas}: wanted {want}, last seen {history.last()}") from err


def test_scaling_during_a_rollout_is_proportional(clients: Clients) -> None:
    """The rollout is held half way (the new class never joins, no machine may be unavailable), so
    both sets keep replicas. As in MCM, scaling up gives the increase to the new set alone (up to
    replicas); scaling down shares the decrease in proportion to the sets' sizes (replicas + maxSurge
    in all, largest set first), after which the rolling pass trims the new set to replicas."""
    control, target, client = clients
    body = deployment("prop", 6)
    body["spec"]["strategy"]["rollingUpdate"] = {"maxSurge": 3, "maxUnavailable": 0}
    ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, body)
    wait_until(lambda: converged(control, target, client, "prop", 6), WAIT, what="6 machines of class-a")
    roll_to(control, "prop", "class-never")
    held = {"class-a": 6, "class-never": 3}
    wait_until(lambda: set_sizes(control, "prop") == held, WAIT, what=f"rollout held at {held}")
    history = SetHistory(control, "prop")
    history.start()
    try:
        scale(control, "prop", 12)  # 15 allowed: the 6 more all go to the new set
        await_split(history, 12, {"class-a": 6, "class-never": 9})
        scale(control, "prop", 3)  # 6 allowed: each set keeps 6/15 of its size (9 → 3.6 → 4, 6 → 2.4 → 2)
        await_split(history, 3, {"class-a": 2, "class-never": 4})
        # then the new set, above replicas, comes down to them; no old machine may go (maxUnavailable 0)
        settled = {"class-a": 2, "class-never": 3}
        wait_until(lambda: set_sizes(control, "prop") == settled, WAIT, what=f"settled at {settled}")
    finally:
        history.stop.set()
        history.join(10)  # its watch ends within 2 s
    ops.delete(control, kinds.MACHINE_DEPLOYMENT.resource, "prop", NS)
    wait_until(lambda: not machines(control, "prop"), WAIT, what="the pool's machines gone")


def await_new_set(control: ApiClient, pool: str, known: list[str]) -> str:
    found: list[str] = []

    def appeared() -> bool:
        found[:] = [
            s["metadata"]["name"] for s in pool_sets(control, pool) if s["metadata"]["name"] not in known
        ]
        return bool(found)

    wait_until(appeared, WAIT, what=f"a new set of {pool}")
    return found[0]


def test_revision_history_limit_removes_old_sets_after_several_rollouts(clients: Clients) -> None:
    control, target, client = clients
    ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, deployment("hist", 1, revisionHistoryLimit=1))
    wait_until(lambda: converged(control, target, client, "hist", 1), WAIT, what="1 machine of class-a")
    created = [s["metadata"]["name"] for s in pool_sets(control, "hist")]
    # three rollouts, three new sets: to class-b, then an extra template label each time
    for step in range(3):
        template: dict[str, Any] = {"spec": {"class": {"kind": "MachineClass", "name": "class-b"}}}
        if step:
            template["metadata"] = {"labels": {"pool": "hist", "rev": str(step)}}
        ops.patch(control, kinds.MACHINE_DEPLOYMENT.resource, "hist", {"spec": {"template": template}}, NS)
        created.append(await_new_set(control, "hist", created))
        wait_until(
            lambda s=str(step): (  # type: ignore[misc]
                rolled_out(clients, "hist", "class-b", 1)
                and all(
                    (m["metadata"].get("labels") or {}).get("rev", "0") == s
                    for m in machines(control, "hist")
                )
            ),
            WAIT,
            interval=0.5,
            what=f"rollout {step + 1} done",
        )
    assert len(created) == 4
    wait_until(lambda: len(pool_sets(control, "hist")) == 2, WAIT, what="the sets beyond the limit deleted")
    kept = {s["metadata"]["name"]: int(s["spec"]["replicas"]) for s in pool_sets(control, "hist")}
    assert kept == {created[-2]: 0, created[-1]: 1}  # the newest set and the newest old one
    ops.delete(control, kinds.MACHINE_DEPLOYMENT.resource, "hist", NS)
    wait_until(lambda: not machines(control, "hist"), WAIT, what="the pool's machines gone")


def pool_state(control: ApiClient, pool: str) -> dict[str, Any]:
    """What a stuck rollout looks like: set sizes, machine phases by class, the deployment's conditions."""
    phases: dict[str, int] = {}
    for m in machines(control, pool):
        phase = ((m.get("status") or {}).get("currentStatus") or {}).get("phase")
        label = f"{m['spec']['class']['name']}/{phase}"
        phases[label] = phases.get(label, 0) + 1
    conditions = [(c.get("type"), c.get("reason")) for c in status(control, pool).get("conditions") or []]
    return {"sets": set_sizes(control, pool), "machines": phases, "conditions": conditions}


def test_killing_a_worker_mid_rollout_never_exceeds_the_surge(
    sandbox: Sandbox, clients: tuple[ApiClient, ApiClient, redis.Redis]
) -> None:
    """Runs last in this module: one worker is gone afterwards. Rolls the deployment the rolling
    update test left on class-b back to class-a (made here when this test runs alone)."""
    control, _, _ = clients
    if ops.get(control, kinds.MACHINE_DEPLOYMENT.resource, "roll", NS, missing_ok=True) is None:
        ops.create(control, kinds.MACHINE_DEPLOYMENT.resource, deployment("roll", 10, class_name="class-b"))
    wait_until(lambda: rolled_out(clients, "roll", "class-b"), WAIT * 2, interval=0.5, what="10 of class-b")
    observer = Observer(control, "roll", total_limit=12, min_available=9)
    observer.start()
    try:
        roll_to(control, "roll", "class-a")
        wait_until(lambda: observer.max_total > 10, WAIT, interval=0.1, what="the rollout to start")
        os.killpg(sandbox.pids["worker-1"], signal.SIGKILL)
        try:
            wait_until(
                lambda: rolled_out(clients, "roll", "class-a"), WAIT * 2, interval=0.5, what="class-a back"
            )
        except TimeoutError as err:
            raise AssertionError(f"rollout stuck after the kill: {pool_state(control, 'roll')}") from err
    finally:
        observer.stop.set()
        observer.join(10)
    check_observer(observer)
