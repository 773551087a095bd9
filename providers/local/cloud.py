"""The local cloud: VMs as Redis hashes, so every worker process, the kubelet simulator and
``mcm-tasks sandbox cloud ls`` see the same machines.

Keys (all under ``<prefix>:localcloud:``, the installation's prefix: in seed mode every namespace's
VMs are in the one cloud, as a real cloud account serves many shoots):

- ``vm:<id>``            hash, one per VM (see :class:`LocalVM`; never the userData itself)
- ``vms``                set of all VM ids
- ``class:<ns>/<name>``  set of VM ids launched from a MachineClass (ListMachines)
- ``machine:<name>``     set of VM ids carrying a machine name, in any namespace (idempotent create,
  GetMachineStatus; readers pick the machine's namespace: :meth:`LocalCloud.by_machine`)
- ``failcreates:<class>:<count>:<code>``  remaining injected create failures for that class
- ``failinitializes:<class>:<count>:<code>``  remaining injected initialize failures for that class
- ``ipseq``              counter behind the VMs' private addresses

A VM's state is derived from timestamps rather than stored, so no background process has to
"boot" or "destroy" anything: it is pending until ``ready_at``, running after, terminating once
deleted, and gone (its records removed by whoever reads it next) after ``gone_at``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import redis
from pydantic import BaseModel, Field

from mcm_tasks.settings import get_settings
from providers.local.spec import FailCreates


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _same_namespace(vm: LocalVM, namespace: str) -> bool:
    return not vm.namespace or not namespace or vm.namespace == namespace


class VMState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    TERMINATING = "terminating"


class LocalVM(BaseModel):
    id: str
    provider_id: str
    #: the Machine's name
    machine: str
    #: the Node's name when the class fixes one (``nodeName``); else the machine's name
    node: str = ""
    namespace: str = ""
    machine_class: str
    zone: str
    region: str
    instance_type: str
    architecture: str
    capacity: dict[str, str] = Field(default_factory=dict)
    #: extra Node labels from the providerSpec
    labels: dict[str, str] = Field(default_factory=dict)
    internal_ip: str
    created: float
    ready_at: float
    never_join: bool = False
    delete_delay: float = 0.0
    deleting_at: float | None = None
    gone_at: float | None = None
    #: a fingerprint of the userData the VM was launched with, never the data itself
    user_data_sha256: str = ""
    user_data_len: int = 0
    #: when the simulated kubelet registered the VM's Node; a kubelet registers once per VM, so a
    #: Node deleted by hand stays deleted
    registered_at: float | None = None
    #: False from launch until InitializeMachine succeeds, for classes with ``failInitializes``
    initialized: bool = True

    @property
    def node_name(self) -> str:
        return self.node or self.machine

    def state(self, now: float) -> VMState:
        if self.deleting_at is not None:
            return VMState.TERMINATING
        return VMState.RUNNING if now >= self.ready_at else VMState.PENDING

    def live(self) -> bool:
        """Not being deleted: the VM a machine may adopt or report."""
        return self.deleting_at is None

    def gone(self, now: float) -> bool:
        return self.gone_at is not None and now >= self.gone_at

    def joins(self, now: float) -> bool:
        """Whether its kubelet should have a Node registered right now (an uninitialized VM's kubelet
        waits for InitializeMachine)."""
        return self.state(now) is VMState.RUNNING and not self.never_join and self.initialized

    def to_hash(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, value in self.model_dump().items():
            if value is None:
                continue
            if isinstance(value, dict):
                out[name] = json.dumps(value, sort_keys=True)
            elif isinstance(value, bool):
                out[name] = "1" if value else "0"
            else:
                out[name] = str(value)
        return out

    @classmethod
    def from_hash(cls, data: dict[Any, Any]) -> LocalVM:
        fields: dict[str, Any] = {_text(k): _text(v) for k, v in data.items()}
        for name in ("capacity", "labels"):
            if name in fields:
                fields[name] = json.loads(fields[name])
        return cls.model_validate(fields)


#: a reader's VMs by id, each with the stored hash it was parsed from (``LocalCloud._load``)
ParseMemo = dict[str, tuple[Any, LocalVM]]


def _parse(vm_id: str, data: dict[Any, Any], parsed: ParseMemo | None) -> LocalVM:
    if parsed is None:
        return LocalVM.from_hash(data)
    known = parsed.get(vm_id)
    if known is not None and known[0] == data:
        return known[1]
    vm = LocalVM.from_hash(data)
    parsed[vm_id] = (data, vm)
    return vm


#: the change feed (a Redis stream) is trimmed to about this many entries: far more than the writes
#: between two full reads of a follower (``Follower.full_every``) at 10 000 VMs
FEED_LENGTH = 20_000


@dataclass
class Follower:
    """A reader that keeps every VM current through the change feed (``LocalCloud.follow``): each
    read re-reads only the VMs written since the last one, and all of them every ``full_every``
    seconds (what became gone by the clock alone, with no write, is forgotten then; a trimmed
    feed is repaired then). The kubelet simulator reads every VM twice a second: at 10 000 VMs a
    full read each time cost it half a core through a scale-up."""

    full_every: float = 10.0
    vms: dict[str, LocalVM] = field(default_factory=dict)
    parsed: ParseMemo = field(default_factory=dict)
    #: the feed's last entry read ('' none yet: the next read is a full one)
    cursor: str = ""
    full_at: float = float("-inf")


_CONSUME_FAILURE = """
local left = redis.call('GET', KEYS[1])
if left then left = tonumber(left) else left = tonumber(ARGV[1]) end
if left > 0 then
  redis.call('SET', KEYS[1], left - 1)
  return 1
end
redis.call('SET', KEYS[1], 0)
return 0
"""


def _key(*parts: str) -> str:
    return ":".join((get_settings().install_prefix, "localcloud", *parts))


class LocalCloud:
    """Redis-backed VM inventory. ``clock`` is wall time: several processes share it."""

    def __init__(self, client: redis.Redis, clock: Callable[[], float] = time.time) -> None:
        self.r = client
        self.clock = clock
        self._consume = client.register_script(_CONSUME_FAILURE)

    # --- keys ---
    @staticmethod
    def vm_key(vm_id: str) -> str:
        return _key("vm", vm_id)

    @staticmethod
    def all_key() -> str:
        return _key("vms")

    @staticmethod
    def class_index(class_key: str) -> str:
        return _key("class", class_key)

    @staticmethod
    def machine_index(machine: str) -> str:
        return _key("machine", machine)

    @staticmethod
    def feed_key() -> str:
        return _key("changes")

    def _note(self, pipe: Any, vm_id: str) -> None:
        """Every write to a VM goes to the change feed in the same pipeline (``follow``)."""
        pipe.xadd(self.feed_key(), {"vm": vm_id}, maxlen=FEED_LENGTH, approximate=True)

    # --- reads ---
    def _load(self, ids: Iterable[str], parsed: ParseMemo | None = None) -> list[LocalVM]:
        """The VMs of ``ids`` still there (a gone one is forgotten on the way). ``parsed``: a reader's
        memo of VMs by id, with the stored hash each was parsed from; a VM whose hash did not change
        is not parsed again (the kubelet simulator reads every VM twice a second, and parsing was
        most of that read at 10 000 VMs). Memoized VMs are shared between reads: not to be changed."""
        ids = sorted(set(ids))
        if not ids:
            if parsed is not None:
                parsed.clear()
            return []
        pipe = self.r.pipeline(transaction=False)
        prefix = self.vm_key("")  # once: the settings' prefix is not free to read, 10 000 times a tick
        for vm_id in ids:
            pipe.hgetall(prefix + vm_id)
        now = self.clock()
        out: list[LocalVM] = []
        dead: list[tuple[str, LocalVM | None]] = []
        for vm_id, data in zip(ids, pipe.execute(), strict=True):
            if not data:
                dead.append((vm_id, None))
                continue
            vm = _parse(vm_id, data, parsed)
            if vm.gone(now):
                dead.append((vm_id, vm))
            else:
                out.append(vm)
        for vm_id, maybe_vm in dead:
            self._forget(vm_id, maybe_vm)
            if parsed is not None:
                parsed.pop(vm_id, None)
        if parsed is not None and len(parsed) > len(ids):  # drop the VMs no longer listed
            for vm_id in parsed.keys() - set(ids):
                del parsed[vm_id]
        return out

    def _members(self, key: str) -> list[str]:
        """Set members as str whether or not the client decodes responses."""
        return [_text(m) for m in self.r.smembers(key)]

    def get(self, vm_id: str) -> LocalVM | None:
        found = self._load([vm_id])
        return found[0] if found else None

    def all(self, parsed: ParseMemo | None = None) -> list[LocalVM]:
        """Every VM, oldest first; ``parsed``: the reader's memo (see ``_load``)."""
        return sorted(self._load(self._members(self.all_key()), parsed), key=lambda vm: (vm.created, vm.id))

    def by_class(self, class_key: str) -> list[LocalVM]:
        return self._load(self._members(self.class_index(class_key)))

    def follow(self, follower: Follower) -> list[LocalVM]:
        """Every VM, oldest first, as ``all`` reads them, kept current in ``follower`` by the change
        feed: only the VMs written since its last read are read again (see ``Follower``)."""
        now = time.monotonic()
        if follower.cursor and now - follower.full_at < follower.full_every:
            entries = self.r.xrange(self.feed_key(), min="(" + follower.cursor, count=FEED_LENGTH) or []
            if len(entries) < FEED_LENGTH:  # else the feed may have been trimmed past the cursor
                if entries:
                    follower.cursor = _text(entries[-1][0])
                    ids = {_text(v) for _, fields in entries for v in (fields or {}).values()}
                    found = {vm.id: vm for vm in self._load(ids)}
                    for vm_id in ids:
                        if vm_id in found:
                            follower.vms[vm_id] = found[vm_id]
                        else:
                            follower.vms.pop(vm_id, None)
                return sorted(follower.vms.values(), key=lambda vm: (vm.created, vm.id))
        last = self.r.xrevrange(self.feed_key(), count=1)  # before the read: later writes are re-read
        follower.cursor = _text(last[0][0]) if last else "0-0"
        vms = self.all(follower.parsed)
        follower.vms = {vm.id: vm for vm in vms}
        follower.full_at = now
        return vms

    def by_machine(self, machine: str, namespace: str | None = None) -> list[LocalVM]:
        """The VMs carrying a machine name; with ``namespace``, only that namespace's (and VMs that
        recorded none), since machines of two shoot namespaces may share a name in a seed."""
        vms = self._load(self._members(self.machine_index(machine)))
        return vms if namespace is None else [vm for vm in vms if _same_namespace(vm, namespace)]

    # --- writes ---
    def _index_ops(self, pipe: Any, vm: LocalVM) -> None:
        pipe.hset(self.vm_key(vm.id), mapping=vm.to_hash())
        pipe.sadd(self.all_key(), vm.id)
        pipe.sadd(self.class_index(vm.machine_class), vm.id)
        pipe.sadd(self.machine_index(vm.machine), vm.id)
        self._note(pipe, vm.id)

    def insert(self, vm: LocalVM) -> None:
        """Store a VM unconditionally (the driver uses :meth:`create_once`)."""
        pipe = self.r.pipeline()
        self._index_ops(pipe, vm)
        pipe.execute()

    def create_once(self, vm: LocalVM) -> tuple[LocalVM, bool]:
        """Store ``vm`` unless a live VM already carries its machine name; returns the VM that
        exists afterwards and whether it is the new one. Safe across processes (WATCH on the
        machine index)."""
        index = self.machine_index(vm.machine)
        result: list[tuple[LocalVM, bool]] = []

        def attempt(pipe: Any) -> None:
            result.clear()
            live = [
                other
                for other in self._load(_text(m) for m in pipe.smembers(index))
                if other.live() and _same_namespace(other, vm.namespace)
            ]
            if live:
                result.append((min(live, key=lambda v: (v.created, v.id)), False))
                pipe.multi()
                return
            pipe.multi()
            self._index_ops(pipe, vm)
            result.append((vm, True))

        self.r.transaction(attempt, index)
        return result[0]

    def terminate(self, vm_id: str) -> LocalVM | None:
        """Start deleting a VM: gone at once without a delete delay, else terminating until then.
        Deleting a terminating VM changes nothing (the first delete's clock runs)."""
        key = self.vm_key(vm_id)
        result: list[LocalVM | None] = []

        def attempt(pipe: Any) -> None:
            result.clear()
            data = pipe.hgetall(key)
            if not data:
                result.append(None)
                pipe.multi()
                return
            vm = LocalVM.from_hash(data)
            result.append(vm)
            pipe.multi()
            if vm.deleting_at is not None:
                return
            now = self.clock()
            vm.deleting_at, vm.gone_at = now, now + vm.delete_delay
            if vm.delete_delay > 0:
                pipe.hset(key, mapping={"deleting_at": str(vm.deleting_at), "gone_at": str(vm.gone_at)})
                self._note(pipe, vm_id)

        self.r.transaction(attempt, key)
        vm = result[0]
        if vm is not None and vm.delete_delay <= 0:
            self._forget(vm.id, vm)
        return vm

    def _forget(self, vm_id: str, vm: LocalVM | None) -> None:
        pipe = self.r.pipeline()
        pipe.delete(self.vm_key(vm_id))
        pipe.srem(self.all_key(), vm_id)
        if vm is not None:
            pipe.srem(self.class_index(vm.machine_class), vm_id)
            pipe.srem(self.machine_index(vm.machine), vm_id)
        self._note(pipe, vm_id)
        pipe.execute()

    def mark_registered(self, vm_id: str, when: float) -> None:
        key = self.vm_key(vm_id)
        self.r.transaction(lambda pipe: self._set_if_present(pipe, vm_id, "registered_at", str(when)), key)

    def restart_kubelet(self, vm_id: str) -> None:
        """The sandbox's order "this VM's kubelet starts again": its registration is forgotten, so the
        kubelet simulator registers its Node again if the Node is gone (a real kubelet does so when it
        restarts; the simulator otherwise registers a VM's Node once)."""
        pipe = self.r.pipeline()
        pipe.hdel(self.vm_key(vm_id), "registered_at")
        self._note(pipe, vm_id)
        pipe.execute()

    def mark_initialized(self, vm_id: str) -> None:
        key = self.vm_key(vm_id)
        self.r.transaction(lambda pipe: self._set_if_present(pipe, vm_id, "initialized", "1"), key)

    def _set_if_present(self, pipe: Any, vm_id: str, field: str, value: str) -> None:
        key = self.vm_key(vm_id)
        present = pipe.exists(key)
        pipe.multi()
        if present:
            pipe.hset(key, field, value)
            self._note(pipe, vm_id)

    def consume_failure(self, class_key: str, fail: FailCreates, operation: str = "creates") -> bool:
        """True if this create (or ``operation="initializes"``: initialize) must fail: draws one from
        the class's budget, shared by every process. The key names count and code, so editing
        ``failCreates`` / ``failInitializes`` arms a fresh budget."""
        key = _key(f"fail{operation}", class_key, str(fail.count), fail.code.name)
        return bool(self._consume(keys=[key], args=[fail.count]))

    def next_ip(self) -> str:
        n = int(self.r.incr(_key("ipseq"))) + 1  # 10.0.0.2 first
        return f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"
