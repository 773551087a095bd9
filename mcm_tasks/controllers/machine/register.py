"""Wires the machine controller's reconcilers into the queue contract. Importing this module is what
a worker does to serve the ``machine``, ``machineclass``, ``secret`` and ``node`` queues (the
``machine-termination`` queue is served by the deletion flow's own registration)."""

from __future__ import annotations

from mcm_tasks import kinds
from mcm_tasks.controllers.common.registration import register as register_reconciler
from mcm_tasks.controllers.machine.classes import reconcile_machine_class
from mcm_tasks.controllers.machine.nodes import reconcile_node
from mcm_tasks.controllers.machine.reconcile import reconcile_machine
from mcm_tasks.controllers.machine.secrets import reconcile_secret
from mcm_tasks.kinds import Queue


def register() -> None:
    register_reconciler(Queue.MACHINE, reconcile_machine, reads=kinds.MACHINE.mirror)
    register_reconciler(Queue.MACHINE_CLASS, reconcile_machine_class)
    register_reconciler(Queue.SECRET, reconcile_secret)
    register_reconciler(Queue.NODE, reconcile_node)


register()
