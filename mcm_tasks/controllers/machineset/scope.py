"""The scope of one MachineSet pass (``common.scope.PassScope``): the set read at the start of the pass
(upstream's ``machineSet`` in ``reconcileClusterMachineSet``), kept as last written, and the
controller's clients, listers, recorder and settings. Built by ``registration.scoped``."""

from __future__ import annotations

from dataclasses import dataclass

from mcm_tasks.api import MachineSet
from mcm_tasks.controllers.common.scope import ObjectName, PassScope


@dataclass(kw_only=True)
class MachineSetScope(PassScope[MachineSet]):
    """One pass over one MachineSet; ``machine_set`` is the set as last read or written in the pass."""

    machine_set = ObjectName[MachineSet]()
