"""Registers the MachineDeployment reconciler for the ``machinedeployment`` queue (imported by a
worker's reconciler modules, see ``mcm_tasks.queue.registry``)."""

from __future__ import annotations

from mcm_tasks.controllers.common.registration import register as register_reconciler
from mcm_tasks.controllers.machinedeployment.reconcile import reconcile_machine_deployment
from mcm_tasks.kinds import Queue

register_reconciler(Queue.MACHINE_DEPLOYMENT, reconcile_machine_deployment)
