"""Every controller's reconcilers. A worker imports this module (the queue registry's default,
``MCM_RECONCILER_MODULES``) to serve all queues; each import registers its kinds."""

from __future__ import annotations

from mcm_tasks.controllers import recovery_io
from mcm_tasks.controllers.machine import register as machine
from mcm_tasks.controllers.machine import register_termination as machine_termination
from mcm_tasks.controllers.machinedeployment import register as machinedeployment
from mcm_tasks.controllers.machineset import register as machineset
from mcm_tasks.controllers.safety import register as safety

__all__ = ["machine", "machine_termination", "machinedeployment", "machineset", "recovery_io", "safety"]
