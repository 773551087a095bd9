"""The ``local`` Driver: MCM's driver contract over the Redis-backed sandbox cloud.

Decisions worth knowing when reading machine-controller behaviour against it:

- CreateMachine is idempotent per machine name: a live VM carrying the name is returned, not
  duplicated (so a retried create after a lost response adopts, as MCM expects of clouds).
- A deleted VM is *terminating* for ``deleteDelaySeconds`` and then gone. GetMachineStatus,
  ListMachines and create's idempotency ignore terminating VMs, like a real cloud's lookups that
  filter out shutting-down instances: a Machine re-created under the same name gets a fresh VM
  instead of adopting a dying one. ``mcm-tasks sandbox cloud ls`` still shows them.
- DeleteMachine by providerID when the Machine has one, else every live VM with its name; nothing
  to delete is success (OK), as upstream.
- NodeName is the machine name, unless the class sets ``nodeName`` (every VM of the class then
  claims that one Node name, which is how a test stages MCM's "VM using old node obj" case).
- userData is required (InvalidArgument otherwise) and only its SHA-256 and length are stored.
- InitializeMachine is Unimplemented (MCM skips the step), unless the class sets ``failInitializes``:
  its VMs then start uninitialized (GetMachineStatus answers Uninitialized, no Node registers) and
  the next ``count`` InitializeMachine calls fail with ``code`` before one succeeds.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from mcm_tasks.api import Machine
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import get_settings
from providers.driver import (
    CreateMachineRequest,
    CreateMachineResponse,
    DeleteMachineRequest,
    DeleteMachineResponse,
    GetMachineStatusRequest,
    GetMachineStatusResponse,
    GetVolumeIDsRequest,
    GetVolumeIDsResponse,
    InitializeMachineRequest,
    InitializeMachineResponse,
    ListMachinesRequest,
    ListMachinesResponse,
    NodeAddress,
)
from providers.errors import Code, MachineError
from providers.local.cloud import LocalCloud, LocalVM
from providers.local.spec import (
    PROVIDER_NAME,
    FailInitializes,
    class_key,
    parse_class,
    placement,
    provider_id_for,
    vm_id_from_provider_id,
    volume_ids,
)
from providers.metrics import driver_operation, record_api_call


def _machine_name(machine: Machine) -> str:
    name = getattr(getattr(machine, "metadata", None), "name", "") or ""
    if not name:
        raise MachineError(Code.InvalidArgument, "machine.metadata.name is required")
    return str(name)


def _machine_namespace(machine: Machine) -> str:
    return str(getattr(getattr(machine, "metadata", None), "namespace", "") or "")


def _provider_id(machine: Machine) -> str:
    return str(getattr(getattr(machine, "spec", None), "provider_id", "") or "")


def _addresses(vm: LocalVM) -> list[NodeAddress]:
    return [
        NodeAddress(type="InternalIP", address=vm.internal_ip),
        NodeAddress(type="Hostname", address=vm.node_name),
    ]


class LocalDriver:
    """One instance per process (``providers.get_driver("local")``); all state is in Redis."""

    def __init__(self, redis_url: str | None = None, clock: Callable[[], float] | None = None) -> None:
        self._redis_url = redis_url
        self._clock = clock
        self._cloud: LocalCloud | None = None

    @property
    def cloud(self) -> LocalCloud:
        # built lazily: get_driver() runs at import time in some processes, before settings are final;
        # the cloud's Redis is the controller's unless the settings name one of its own
        if self._cloud is None:
            client = get_redis(self._redis_url or get_settings().local_cloud_redis_url or None)
            self._cloud = LocalCloud(client) if self._clock is None else LocalCloud(client, self._clock)
        return self._cloud

    def _api(self, service: str, call: Callable[[], Any]) -> Any:
        """A call to the cloud's 'API' (Redis), counted under mcm_cloud_api_requests_*."""
        started = self.cloud.clock()
        try:
            result = call()
        except Exception:
            record_api_call(PROVIDER_NAME, service, 0.0, ok=False)
            raise
        record_api_call(PROVIDER_NAME, service, max(self.cloud.clock() - started, 0.0), ok=True)
        return result

    def _live_by_machine(self, machine: Machine) -> list[LocalVM]:
        name, namespace = _machine_name(machine), _machine_namespace(machine)
        vms: list[LocalVM] = self._api("DescribeInstances", lambda: self.cloud.by_machine(name, namespace))
        return [vm for vm in vms if vm.live()]

    # --- the contract ---
    def create_machine(self, req: CreateMachineRequest) -> CreateMachineResponse:
        with driver_operation(PROVIDER_NAME, "create_machine"):
            spec = parse_class(req.machine_class, req.secret)
            cls = class_key(req.machine_class)
            existing = self._live_by_machine(req.machine)
            if not existing and spec.fail_creates is not None:
                fail = spec.fail_creates
                if self._api("RunInstances", lambda: self.cloud.consume_failure(cls, fail)):
                    raise MachineError(fail.code, f"injected create failure for class {cls} (failCreates)")
            if existing:
                vm = min(existing, key=lambda v: (v.created, v.id))
            else:
                if spec.create_delay_seconds:
                    time.sleep(spec.create_delay_seconds)
                new = self._new_vm(req, spec, cls)
                vm = self._api("RunInstances", lambda: self.cloud.create_once(new)[0])
            return CreateMachineResponse(
                provider_id=vm.provider_id,
                node_name=vm.node_name,
                last_known_state=f"vm {vm.id} created",
                addresses=_addresses(vm),
            )

    def _new_vm(self, req: CreateMachineRequest, spec: Any, cls: str) -> LocalVM:
        where = placement(req.machine_class, spec)
        vm_id = "i-" + uuid.uuid4().hex[:16]
        user_data = req.secret.data.get("userData", b"")
        now = self.cloud.clock()
        return LocalVM(
            id=vm_id,
            provider_id=provider_id_for(where.zone, vm_id),
            machine=_machine_name(req.machine),
            node=spec.node_name,
            namespace=_machine_namespace(req.machine),
            machine_class=cls,
            zone=where.zone,
            region=where.region,
            instance_type=where.instance_type,
            architecture=where.architecture,
            capacity=where.capacity,
            labels=spec.labels,
            internal_ip=self.cloud.next_ip(),
            created=now,
            ready_at=now + spec.boot_delay_seconds,
            never_join=spec.never_join,
            initialized=spec.fail_initializes is None,
            delete_delay=spec.delete_delay_seconds,
            user_data_sha256=hashlib.sha256(user_data).hexdigest(),
            user_data_len=len(user_data),
        )

    def initialize_machine(self, req: InitializeMachineRequest) -> InitializeMachineResponse:
        """Nothing to set up after launch in this cloud unless the class injects initialization
        (``failInitializes``); otherwise Unimplemented, which MCM takes as "skip the step" (not counted
        as a failed driver call: it is the contract's way of saying "not needed")."""
        spec = parse_class(req.machine_class)
        if spec.fail_initializes is None:
            raise MachineError(Code.Unimplemented, "the local provider needs no initialization")
        with driver_operation(PROVIDER_NAME, "initialize_machine"):
            return self._initialize(req, spec.fail_initializes)

    def _initialize(self, req: InitializeMachineRequest, fail: FailInitializes) -> InitializeMachineResponse:
        vm = self._find(req.machine)
        if not vm.initialized:
            cls = class_key(req.machine_class)
            if self._api(
                "ModifyInstanceAttribute", lambda: self.cloud.consume_failure(cls, fail, "initializes")
            ):
                raise MachineError(
                    fail.code, f"injected initialize failure for class {cls} (failInitializes)"
                )
            self._api("ModifyInstanceAttribute", lambda: self.cloud.mark_initialized(vm.id))
        return InitializeMachineResponse(
            provider_id=vm.provider_id, node_name=vm.node_name, addresses=_addresses(vm)
        )

    def delete_machine(self, req: DeleteMachineRequest) -> DeleteMachineResponse:
        with driver_operation(PROVIDER_NAME, "delete_machine"):
            parse_class(req.machine_class, req.secret)
            provider_id = _provider_id(req.machine)
            if provider_id:
                vm_id = vm_id_from_provider_id(provider_id)
                targets = [vm_id] if vm_id else []
            else:
                targets = [vm.id for vm in self._live_by_machine(req.machine)]
            deleted = [vm for vm in (self._terminate(vm_id) for vm_id in targets) if vm is not None]
            if not deleted:
                return DeleteMachineResponse(last_known_state="no VM found: already deleted")
            return DeleteMachineResponse(last_known_state=f"vm {', '.join(vm.id for vm in deleted)} deleted")

    def _terminate(self, vm_id: str) -> LocalVM | None:
        vm: LocalVM | None = self._api("TerminateInstances", lambda: self.cloud.terminate(vm_id))
        return vm

    def _find(self, machine: Machine) -> LocalVM:
        """The machine's one live VM, by name, else by its providerID; NotFound or OutOfRange."""
        name = _machine_name(machine)
        found = self._live_by_machine(machine)
        if len(found) > 1:
            ids = ", ".join(sorted(vm.id for vm in found))
            raise MachineError(Code.OutOfRange, f"multiple VMs carry machine name {name}: {ids}")
        if found:
            return found[0]
        vm_id = vm_id_from_provider_id(_provider_id(machine))
        vm: LocalVM | None = self._api("DescribeInstances", lambda: self.cloud.get(vm_id)) if vm_id else None
        if vm is None or not vm.live():
            raise MachineError(Code.NotFound, f"no VM for machine {name}")
        return vm

    def get_machine_status(self, req: GetMachineStatusRequest) -> GetMachineStatusResponse:
        with driver_operation(PROVIDER_NAME, "get_machine_status"):
            parse_class(req.machine_class)
            vm = self._find(req.machine)
            if not vm.initialized:
                raise MachineError(
                    Code.Uninitialized, f"VM {vm.id} of machine {vm.machine} is not initialized yet"
                )
            return GetMachineStatusResponse(
                provider_id=vm.provider_id, node_name=vm.node_name, addresses=_addresses(vm)
            )

    def list_machines(self, req: ListMachinesRequest) -> ListMachinesResponse:
        with driver_operation(PROVIDER_NAME, "list_machine"):
            parse_class(req.machine_class)
            cls = class_key(req.machine_class)
            vms: list[LocalVM] = self._api("DescribeInstances", lambda: self.cloud.by_class(cls))
            return ListMachinesResponse(machine_list={vm.provider_id: vm.machine for vm in vms if vm.live()})

    def get_volume_ids(self, req: GetVolumeIDsRequest) -> GetVolumeIDsResponse:
        with driver_operation(PROVIDER_NAME, "get_volume_ids"):
            return GetVolumeIDsResponse(volume_ids=volume_ids(req.pv_specs))
