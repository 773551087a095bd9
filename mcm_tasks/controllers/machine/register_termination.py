"""Wires the deletion flow to the queue contract: machines being deleted are reconciled on their own
``machine-termination`` queue, so long drains never hold up creations (MCM added that queue when
drains starved its machine queue). Imported by the worker's reconciler modules."""

from __future__ import annotations

from mcm_tasks import kinds
from mcm_tasks.controllers.common.registration import register as register_reconciler
from mcm_tasks.controllers.machine.deletion import reconcile_termination
from mcm_tasks.kinds import Queue

register_reconciler(Queue.MACHINE_TERMINATION, reconcile_termination, reads=kinds.MACHINE.mirror)
