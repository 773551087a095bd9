"""The creation flow (upstream ``triggerCreationFlow``): find or launch the machine's VM, record it on the
machine, set Pending.

Order, as MCM: fill in userData's placeholders; ask the driver for the VM first (GetMachineStatus)
and adopt what it finds; otherwise launch one (CreateMachine) and check that no stale Node of an
older VM carries its node name; initialize it when freshly launched or reported Uninitialized; record
``node`` label, priority annotation and providerID; phase Pending (Available without a target).

Deliberate differences from upstream, each to save a task or a write and none visible in the result:
the label update and the Pending status are written in the same reconcile (upstream requeues between
them), and the bootstrap token is only created when userData asks for it (``bootstrap``). A stale
node is one with the VM's node name whose providerID belongs to another VM (what upstream's comment
says it should check), or, for nodes without a providerID, upstream's name check.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachinePhase, MachineState, MachineStatus, NodeAddress
from mcm_tasks.api.constants import MACHINE_PRIORITY_ANNOTATION, MACHINE_PRIORITY_DEFAULT, NODE_LABEL_KEY
from mcm_tasks.api.enums import MachineOperationType
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.context_io import ClassContext
from mcm_tasks.controllers.common.lagging_io import mirror_lagging
from mcm_tasks.controllers.common.status import current_status, last_operation, updated_status
from mcm_tasks.controllers.common.status_io import update_machine_status, write_operation, write_problem
from mcm_tasks.controllers.machine import bootstrap_io, metrics
from mcm_tasks.controllers.machine.health import creation_timeout
from mcm_tasks.controllers.machine.scope import MachineScope
from mcm_tasks.kube import ops
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import Settings
from mcm_tasks.tracing import TRACE_ANNOTATION, trace_id_hex, traced_driver
from mcm_tasks.tracing import enabled as tracing_enabled
from providers import Code, MachineError, UnknownProviderError, get_driver
from providers.driver import (
    CreateMachineRequest,
    DeleteMachineRequest,
    Driver,
    GetMachineStatusRequest,
    InitializeMachineRequest,
    Secret,
)
from providers.errors import TRANSIENT_CODES

log = logging.getLogger(__name__)

CREATING_DESCRIPTION = "Creating machine on cloud provider"
CREATED_DESCRIPTION = "Created machine on cloud provider"
STALE_NODE_DESCRIPTION = "VM using old node obj"
INITIALIZE_SUFFIX = "Initialize VM Instance"


# --- pure decisions --------------------------------------------------------------------------------------


def create_failure_phase(machine: Machine, now: datetime, settings: Settings) -> MachinePhase:
    """Failed once the creation timeout has passed since the machine was created, else CrashLoopBackOff."""
    created = machine.metadata.creation_timestamp
    if created is not None and (now - created).total_seconds() > creation_timeout(machine, settings):
        return MachinePhase.FAILED
    return MachinePhase.CRASH_LOOP_BACK_OFF


def create_error_retry(code: Code, settings: Settings) -> float:
    if code == Code.ResourceExhausted:
        return settings.resource_exhausted_retry
    if code in TRANSIENT_CODES:
        return settings.short_retry
    return settings.medium_retry


def is_stale_node(
    node: Mapping[str, Any] | None, node_name: str, machine_name: str, provider_id: str
) -> bool:
    if node is None:
        return False
    node_provider_id = str((node.get("spec") or {}).get("providerID") or "")
    if node_provider_id:
        return node_provider_id != provider_id
    return node_name != machine_name


def labels_patch(
    machine: Machine, node_name: str, provider_id: str, target_mode: bool
) -> dict[str, Any] | None:
    """MCM's ``updateLabels`` as a conditional merge patch; None when the machine already has it all.

    As upstream, the ``node`` label is written only when the machine has none: a label someone set
    (or an earlier VM's node name) is left as it is."""
    meta = machine.metadata
    metadata: dict[str, Any] = {}
    if target_mode and NODE_LABEL_KEY not in meta.labels and node_name:
        metadata["labels"] = {NODE_LABEL_KEY: node_name}
    if not meta.annotations.get(MACHINE_PRIORITY_ANNOTATION):
        metadata["annotations"] = {MACHINE_PRIORITY_ANNOTATION: MACHINE_PRIORITY_DEFAULT}
    spec = {"providerID": provider_id} if machine.spec.provider_id != provider_id else {}
    if not metadata and not spec:
        return None
    metadata["resourceVersion"] = meta.resource_version
    patch: dict[str, Any] = {"metadata": metadata}
    if spec:
        patch["spec"] = spec
    return patch


@dataclass(frozen=True)
class InitializeFailure:
    """What a failed InitializeMachine writes on the machine, and when the reconcile comes back."""

    description: str
    phase: MachinePhase
    error_code: Code
    retry: float


def initialize_failure(
    machine: Machine, err: BaseException, now: datetime, settings: Settings
) -> InitializeFailure | None:
    """MCM's ``initializeMachine`` error handling. None when the driver answered Unimplemented (the
    provider needs no initialization: carry on). Any other failure, whatever its code (a driver bug
    counts as Internal): "Provider error: <err>. Initialize VM Instance", the create failure phase
    (CrashLoopBackOff, or Failed past the creation timeout), and ShortRetry; the next pass finds the
    VM through GetMachineStatus, which a provider answers with Uninitialized until it is initialized."""
    code = error_code_of(err)
    if code == Code.Unimplemented:
        return None
    return InitializeFailure(
        description=f"Provider error: {err}. {INITIALIZE_SUFFIX}",
        phase=create_failure_phase(machine, now, settings),
        error_code=code,
        retry=settings.short_retry,
    )


def cloud_message(err: BaseException) -> str:
    return f"Cloud provider message - {err}"


def error_code_of(err: BaseException) -> Code:
    return err.code if isinstance(err, MachineError) else Code.Internal


# --- the flow --------------------------------------------------------------------------------------------


def _create_error(
    scope: MachineScope, machine: Machine, err: BaseException, last_known_state: str = ""
) -> Requeue:
    """MCM's ``machineCreateErrorHandler``."""
    settings = scope.settings
    code = error_code_of(err)
    write_operation(
        scope,
        machine,
        cloud_message(err),
        MachineState.FAILED,
        MachineOperationType.CREATE,
        phase=create_failure_phase(machine, scope.clock(), settings),
        error_code=code.name,
        last_known_state=last_known_state or None,
    )
    return Requeue(create_error_retry(code, settings))


def _driver(scope: MachineScope, machine: Machine, cc: ClassContext) -> Driver | None:
    try:
        return traced_driver(get_driver(cc.machine_class.provider))
    except UnknownProviderError as err:
        write_problem(scope, machine, f"MachineClass {cc.machine_class.metadata.name}: {err}")
        return None


def trigger_creation_flow(scope: MachineScope, machine: Machine, cc: ClassContext) -> Requeue:
    settings = scope.settings
    if cc.missing_secrets:
        names = ", ".join(cc.missing_secrets)
        write_problem(
            scope,
            machine,
            f"Secret {names} referenced by MachineClass {cc.machine_class.metadata.name} not found",
        )
        return Requeue.short()
    driver = _driver(scope, machine, cc)
    if driver is None:
        return Requeue.long()
    name = machine.metadata.name or ""
    target = scope.target
    secret = bootstrap_io.prepare_secret(
        cc.secret,
        name,
        target,
        creation_timeout(machine, settings),
        settings.bootstrap_token_auth_extra_groups,
        scope.precise_clock(),
    )
    if secret is None:
        write_problem(
            scope, machine, f"Secret data of MachineClass {cc.machine_class.metadata.name} has no userData"
        )
        return Requeue.short()
    with context_io.creation_in_flight(machine.key, settings.reconcile_lock_ttl):
        return _create(scope, machine, cc, driver, secret, target is not None)


@dataclass
class VM:
    """What the creation flow learnt about the machine's VM."""

    node_name: str
    provider_id: str
    addresses: list[NodeAddress] = field(default_factory=list)
    #: freshly launched, or reported Uninitialized: InitializeMachine must run
    uninitialized: bool = False


def _addresses(found: list[Any]) -> list[NodeAddress]:
    return [NodeAddress(type=a.type, address=a.address) for a in found]


def _recorded(machine: Machine, uninitialized: bool) -> VM:
    """The VM as the machine records it (GetMachineStatus found nothing, but a providerID is set)."""
    labels = machine.metadata.labels
    return VM(labels.get(NODE_LABEL_KEY, ""), machine.spec.provider_id, uninitialized=uninitialized)


def _find_or_launch(
    scope: MachineScope, machine: Machine, cc: ClassContext, driver: Driver, secret: Secret, target_mode: bool
) -> VM | Requeue:
    mc = cc.machine_class
    try:
        found = driver.get_machine_status(
            GetMachineStatusRequest(machine=machine, machine_class=mc, secret=secret)
        )
        return VM(found.node_name, found.provider_id, _addresses(found.addresses))
    except MachineError as err:
        if err.code == Code.Uninitialized:
            return _recorded(machine, uninitialized=True)
        if err.code not in (Code.NotFound, Code.Unimplemented):
            return _create_error(scope, machine, err)
        if machine.spec.provider_id:
            return _recorded(machine, uninitialized=False)
    except Exception as err:  # a driver bug is a provider error like any other, not a crash loop
        log.exception("machine %s: GetMachineStatus raised", machine.key)
        return _create_error(scope, machine, err)

    started = time.perf_counter()
    try:
        created = driver.create_machine(
            CreateMachineRequest(machine=machine, machine_class=mc, secret=secret)
        )
    except Exception as err:
        log.warning("machine %s: create failed: %s", machine.key, err)
        return _create_error(scope, machine, err)
    metrics.observe_duration("create", machine, time.perf_counter() - started, mc)
    vm = VM(created.node_name, created.provider_id, _addresses(created.addresses), uninitialized=True)
    name = machine.metadata.name or ""
    if target_mode and is_stale_node(
        context_io.get_node(scope.target, vm.node_name), vm.node_name, name, vm.provider_id
    ):
        return _stale_node(scope, machine, cc, driver, secret, vm.provider_id)
    return vm


def _create(
    scope: MachineScope, machine: Machine, cc: ClassContext, driver: Driver, secret: Secret, target_mode: bool
) -> Requeue:
    vm = _find_or_launch(scope, machine, cc, driver, secret, target_mode)
    if isinstance(vm, Requeue):
        return vm
    if (target_mode and not vm.node_name) or not vm.provider_id:
        write_operation(
            scope,
            machine,
            f"VM of machine {machine.metadata.name} reported an empty node name or providerID",
            MachineState.FAILED,
            MachineOperationType.CREATE,
            error_code=Code.Internal.name,
        )
        return Requeue.medium()

    patch = labels_patch(machine, vm.node_name, vm.provider_id, target_mode)
    if patch is not None and tracing_enabled() and machine.metadata.uid:
        # the trace's id, for an operator to go from kubectl to the trace (written with the labels)
        patch["metadata"].setdefault("annotations", {})[TRACE_ANNOTATION] = trace_id_hex(machine.metadata.uid)
    if patch is not None:
        api = scope.api
        written = ops.patch(
            api, kinds.MACHINE.resource, machine.metadata.name or "", patch, machine.metadata.namespace
        )
        machine = Machine.model_validate(written)

    if vm.uninitialized:
        retry = _initialize(scope, machine, cc, driver, secret)
        if retry is not None:
            return retry

    if machine.status.current_status.phase not in ("", MachinePhase.CRASH_LOOP_BACK_OFF):
        return Requeue.long()
    update_machine_status(scope, machine, created_status(machine, vm, target_mode, scope.clock()))
    if mirror_lagging(scope.settings):  # the Node's join is polled (``MachineScope.waits_under_lag``)
        return Requeue(scope.settings.mirror_lag_node_poll)
    return Requeue.short()


def created_status(machine: Machine, vm: VM, target_mode: bool, now: datetime) -> MachineStatus:
    """Pending until the node joins; without a target cluster there is no node to wait for:
    Available at once, with the VM's addresses."""
    if target_mode:
        return updated_status(
            machine,
            last_op=last_operation(
                CREATING_DESCRIPTION, MachineState.PROCESSING, MachineOperationType.CREATE, now=now
            ),
            current=current_status(MachinePhase.PENDING, timeout_active=True, now=now),
        )
    status = updated_status(
        machine,
        last_op=last_operation(
            CREATED_DESCRIPTION, MachineState.SUCCESSFUL, MachineOperationType.CREATE, now=now
        ),
        current=current_status(MachinePhase.AVAILABLE, now=now),
    )
    addresses = address_status([*machine.status.addresses, *vm.addresses], vm.node_name)
    return status.model_copy(update={"addresses": addresses})


def address_status(addresses: list[NodeAddress], node_name: str) -> list[NodeAddress]:
    """Deduplicated and sorted, with the node name as a Hostname (MCM's ``buildAddressStatus``)."""
    unique = {(a.type, a.address) for a in addresses}
    if node_name:
        unique.add(("Hostname", node_name))
    return [NodeAddress(type=t, address=a) for t, a in sorted(unique, key=lambda ta: ta[0] + ta[1])]


def _stale_node(
    scope: MachineScope, machine: Machine, cc: ClassContext, driver: Driver, secret: Secret, provider_id: str
) -> Requeue:
    """A Node of an older VM holds the name: delete the VM just made and fail the machine."""
    log.warning(
        "machine %s: a stale node holds the node name of its new VM %s; deleting the VM",
        machine.key,
        provider_id,
    )
    stub = machine.model_copy(update={"spec": machine.spec.model_copy(update={"provider_id": provider_id})})
    try:
        driver.delete_machine(
            DeleteMachineRequest(machine=stub, machine_class=cc.machine_class, secret=secret)
        )
    except Exception as err:  # the orphan-VM collector gets it if this fails
        log.warning("machine %s: deleting the VM of a stale node failed: %s", machine.key, err)
    write_operation(
        scope,
        machine,
        STALE_NODE_DESCRIPTION,
        MachineState.FAILED,
        MachineOperationType.CREATE,
        phase=MachinePhase.FAILED,
    )
    return Requeue.short()


def _initialize(
    scope: MachineScope, machine: Machine, cc: ClassContext, driver: Driver, secret: Secret
) -> Requeue | None:
    """InitializeMachine; None to carry on (done or not needed), else the requeue after a failure."""
    started = time.perf_counter()
    try:
        driver.initialize_machine(
            InitializeMachineRequest(machine=machine, machine_class=cc.machine_class, secret=secret)
        )
    except Exception as err:  # a driver bug is a provider error like any other, not a crash loop
        failure = initialize_failure(machine, err, scope.clock(), scope.settings)
        if failure is None:
            return None
        log.warning("machine %s: initialize failed: %s", machine.key, err)
        write_operation(
            scope,
            machine,
            failure.description,
            MachineState.FAILED,
            MachineOperationType.CREATE,
            phase=failure.phase,
            error_code=failure.error_code.name,
        )
        return Requeue(failure.retry)
    metrics.observe_duration("initialize", machine, time.perf_counter() - started, cc.machine_class)
    return None
