"""What the deletion and drain scenarios run on, in process: the sandbox API server (control and target
in one, pods finalized when their grace period ends), a real Redis, the local cloud through the local
Driver, the kubelet simulator in a thread, optionally the informer filling the Redis mirror; and the
loop that calls the termination reconciler over and over, honouring its requeues, on compressed
timeouts. No tests here: ``test_drain_scenarios`` and ``test_deletion_flow`` use it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_sandbox.crds import install_crds
from mcm_sandbox.kubelet.simulator import KubeletSimulator
from mcm_sandbox.procs import ApiServer, wait_until
from mcm_sandbox.testing.informers import InformerThread, sandbox_settings
from mcm_tasks.api import Machine, MachineClass
from mcm_tasks.api.constants import MCM_FINALIZER, NODE_LABEL_KEY
from mcm_tasks.cache import layout
from mcm_tasks.cache.reader import CacheReader
from mcm_tasks.controllers.machine.deletion import reconcile_termination
from mcm_tasks.controllers.machine.drain.state_io import drain_key
from mcm_tasks.kube.clients import reset_clusters
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, reset_settings
from providers.driver import CreateMachineRequest, Secret
from providers.local import CSI_DRIVER, LocalCloud, LocalDriver

GROUP, VERSION = "machine.sapcloud.io", "v1alpha1"
CLASS = "local-drain"
USER_DATA = Secret(data={"userData": b"#!/bin/sh\n"})
SETTINGS = {
    "namespace": "default",
    "short_retry": "0.2s",
    "medium_retry": "0.5s",
    "long_retry": "1s",
    "conflict_retry": "0.05s",
    "pod_eviction_retry_interval": "0.2s",
    "machine_drain_timeout": "60s",
    "force_drain_timeout": "2s",
    "machine_pv_detach_timeout": "5s",
    "machine_pv_reattach_timeout": "0.5s",
    "force_drain_unhealthy_after": "60s",
    "kube_api_qps": 1000,
    "kube_api_burst": 1000,
    # a pass per step, as MCM: the driving loop then sees every description (the chain has its test)
    "deletion_steps_per_pass": 1,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    api_server = ApiServer(tmp_path_factory.mktemp("deletion"), name="deletion").start()
    api = config.new_client_from_config(config_file=str(api_server.kubeconfig))
    install_crds(api)
    api.close()
    yield api_server
    api_server.stop()


@dataclass
class Env:
    api: ApiClient
    kubeconfig: Path
    redis: redis.Redis
    driver: LocalDriver
    namespace: str
    settings: dict[str, Any] = field(default_factory=dict)
    core: Any = field(init=False)
    custom: Any = field(init=False)
    policy: Any = field(init=False)
    storage: Any = field(init=False)

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.policy = client.PolicyV1Api(self.api)
        self.storage = client.StorageV1Api(self.api)

    # --- reads ---
    def machine(self, name: str) -> Machine | None:
        try:
            raw = self.custom.get_namespaced_custom_object(GROUP, VERSION, "default", "machines", name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return Machine.model_validate(raw)

    def node(self, name: str) -> dict[str, Any] | None:
        return self._get(lambda: self.core.read_node(name))

    def pod(self, name: str) -> dict[str, Any] | None:
        return self._get(lambda: self.core.read_namespaced_pod(name, self.namespace))

    def _get(self, read: Callable[[], Any]) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.api.sanitize_for_serialization(read())
            return found
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def live_vms(self, name: str) -> list[Any]:
        return [vm for vm in LocalCloud(self.redis).all() if vm.machine == name]

    def events(self, name: str) -> list[tuple[str, str]]:
        found = self.core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}")
        return [(e.reason, e.message) for e in found.items]

    # --- machines ---
    def machine_class(self) -> MachineClass:
        raw = self.custom.get_namespaced_custom_object(GROUP, VERSION, "default", "machineclasses", CLASS)
        return MachineClass.model_validate(raw)

    def launch(
        self, name: str, *, labels: dict[str, str] | None = None, spec: dict[str, Any] | None = None
    ) -> None:
        """A VM in the local cloud, its Node registered by the kubelet, and a Running Machine for it."""
        stub = Machine.model_validate({"metadata": {"name": name, "namespace": "default"}})
        request = CreateMachineRequest(machine=stub, machine_class=self.machine_class(), secret=USER_DATA)
        provider_id = self.driver.create_machine(request).provider_id
        wait_until(lambda: self.node(name) is not None, 15, what=f"node {name} registered")
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Machine",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": {NODE_LABEL_KEY: name, **(labels or {})},
                "finalizers": [MCM_FINALIZER],
            },
            "spec": {
                "class": {"kind": "MachineClass", "name": CLASS},
                "providerID": provider_id,
                **(spec or {}),
            },
        }
        created = self.custom.create_namespaced_custom_object(GROUP, VERSION, "default", "machines", body)
        created["status"] = {
            "currentStatus": {"phase": "Running"},
            "lastOperation": {"description": "Machine is running", "state": "Successful", "type": "Create"},
        }
        self.custom.replace_namespaced_custom_object_status(
            GROUP, VERSION, "default", "machines", name, created
        )

    def delete_machine(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, "default", "machines", name)

    # --- pods and friends ---
    def run_pod(
        self,
        name: str,
        node: str,
        *,
        labels: dict[str, str] | None = None,
        claim: str = "",
        priority: int | None = None,
        owner: str = "",
        annotations: dict[str, str] | None = None,
    ) -> None:
        spec: dict[str, Any] = {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox"}],
        }
        if claim:
            spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        if priority is not None:
            spec["priority"] = priority
        meta: dict[str, Any] = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
        if owner:
            # the sandbox collects pods whose owner does not exist: a ConfigMap stands in for the owner
            stand_in = self.core.create_namespaced_config_map(
                self.namespace, {"metadata": {"name": f"{name}-owner"}}
            )
            ref = {
                "apiVersion": "apps/v1",
                "kind": owner,
                "name": f"{name}-owner",
                "uid": stand_in.metadata.uid,
            }
            meta["ownerReferences"] = [{**ref, "controller": True}]
        self.core.create_namespaced_pod(self.namespace, {"metadata": meta, "spec": spec})

    def mark_ready(self, name: str) -> None:
        """Status of a pod on a node without a kubelet: Running and Ready."""
        body = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        self.core.patch_namespaced_pod_status(name, self.namespace, body)

    def volume(self, name: str, handle: str) -> None:
        self.core.create_persistent_volume(
            {
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "csi": {"driver": CSI_DRIVER, "volumeHandle": handle},
                    "claimRef": {"namespace": self.namespace, "name": name},
                },
            }
        )
        self.core.create_namespaced_persistent_volume_claim(
            self.namespace,
            {
                "metadata": {"name": name},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "volumeName": name,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )

    def budget(self, name: str, selector: dict[str, str], **spec: Any) -> None:
        body = {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": selector}, **spec}}
        self.policy.create_namespaced_pod_disruption_budget(self.namespace, body)

    def budget_status(self, name: str) -> dict[str, Any]:
        found = self._get(lambda: self.policy.read_namespaced_pod_disruption_budget(name, self.namespace))
        return dict((found or {}).get("status") or {})

    def running(self, *names: str) -> bool:
        def ready(pod: dict[str, Any] | None) -> bool:
            conditions = ((pod or {}).get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

        return all(ready(self.pod(n)) for n in names)


def reconfigure(env: Env, **overrides: Any) -> None:
    """Change settings for one test, keeping the fixture's."""
    configure({**env.settings, **overrides})


@pytest.fixture()
def env(server: ApiServer, redis_url: str, request: pytest.FixtureRequest) -> Iterator[Env]:
    """Parametrize indirectly with ``{"detach_delay": s}`` for a slower simulated attach/detach."""
    detach_delay = float(getattr(request, "param", {}).get("detach_delay", 0.2))
    configure(
        {**SETTINGS, "redis_url": redis_url, "control_kubeconfig": str(server.kubeconfig),
         "target_kubeconfig": str(server.kubeconfig)}
    )  # fmt: skip
    reset_clusters()
    api = config.new_client_from_config(config_file=str(server.kubeconfig))
    core: Any = client.CoreV1Api(api)
    namespace = f"drain-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        core.create_namespaced_secret(
            "default", {"metadata": {"name": "local-drain"}, "stringData": {"userData": "x"}}
        )
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            "machineclasses",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "MachineClass",
                "metadata": {"name": CLASS, "namespace": "default"},
                "provider": "local",
                "providerSpec": {"zone": "local-a"},
                "secretRef": {"name": "local-drain", "namespace": "default"},
            },
        )
    except ApiException as err:
        if err.status != 409:
            raise
    redis_client = get_redis(redis_url)
    sim = KubeletSimulator(
        api, LocalCloud(redis_client), heartbeat_interval=1.0, node_grace=30.0, detach_delay=detach_delay
    )
    stop = threading.Event()
    thread = threading.Thread(target=sim.run, args=(stop, 0.05), daemon=True)
    thread.start()
    found = Env(api, server.kubeconfig, redis_client, LocalDriver(redis_url), namespace)
    found.settings = {
        **SETTINGS,
        "redis_url": redis_url,
        "control_kubeconfig": str(server.kubeconfig),
        "target_kubeconfig": str(server.kubeconfig),
    }
    yield found
    stop.set()
    thread.join(10)
    api.close()
    reset_clusters()
    reset_settings()


@dataclass
class Trace:
    """What the driving loop saw: each new description, and anything a test records per round."""

    descriptions: list[str] = field(default_factory=list)
    rounds: int = 0
    notes: dict[str, Any] = field(default_factory=dict)


def drive(
    env: Env,
    name: str,
    *,
    until: Callable[[Trace], bool] | None = None,
    observe: Callable[[Trace], None] | None = None,
    timeout: float = 30.0,
    trace: Trace | None = None,
) -> Trace:
    """Call the termination reconciler whenever its last requeue is due, until the Machine is gone (or
    ``until`` holds). The test's only clock is the reconciler's own countdowns."""
    trace = trace or Trace()
    due = [0.0]

    def round_() -> bool:
        if time.monotonic() < due[0]:
            return False
        result = reconcile_termination(f"default/{name}")
        trace.rounds += 1
        machine = env.machine(name)
        if machine is not None:
            text = machine.status.last_operation.description
            if not trace.descriptions or trace.descriptions[-1] != text:
                trace.descriptions.append(text)
        if observe is not None:
            observe(trace)
        if machine is None or (until is not None and until(trace)):
            return True
        due[0] = time.monotonic() + (result.after if result is not None else 0.05)
        return False

    wait_until(round_, timeout, interval=0.01, what=f"deletion of machine {name}")
    return trace


def assert_all_gone(env: Env, name: str) -> None:
    assert env.machine(name) is None
    assert env.node(name) is None
    wait_until(lambda: not env.live_vms(name), 10, what=f"VM of {name} gone from the local cloud")
    assert not env.redis.exists(drain_key(f"default/{name}"))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def index(trace: Trace, text: str) -> int:
    return next(i for i, d in enumerate(trace.descriptions) if text in d)


@pytest.fixture()
def mirror(env: Env, redis_url: str) -> Iterator[InformerThread]:
    """The informer in a thread, so that the flow reads the cluster from the Redis mirror."""
    overrides = {k: v for k, v in SETTINGS.items() if k != "namespace"}
    settings = sandbox_settings(env.kubeconfig, redis_url, "default", **overrides)
    with InformerThread(settings) as informer:
        wait_until(
            lambda: informer.synced() and all(CacheReader(env.redis).synced(k) for k in layout.ALL_KINDS),
            15,
            what="mirror synced",
        )
        yield informer
