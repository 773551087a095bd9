"""Registers the MachineSet reconciler for the ``machineset`` queue (imported by a worker's reconciler
modules, see ``mcm_tasks.queue.registry``)."""

from __future__ import annotations

from mcm_tasks import kinds
from mcm_tasks.controllers.common.registration import register as register_reconciler
from mcm_tasks.controllers.machineset.reconcile import reconcile_machine_set
from mcm_tasks.kinds import Queue

register_reconciler(Queue.MACHINE_SET, reconcile_machine_set, reads=kinds.MACHINE_SET.mirror)
