"""The scope of one machine pass (``common.scope.PassScope``): the Machine read at the start of the
pass (upstream's ``machine`` argument of ``reconcileClusterMachine`` and ``triggerDeletionFlow``), its
class context once the class phase has read it, and the controller's clients, listers, recorder and
settings. The machine and the deletion reconcilers are built on it by ``registration.scoped``."""

from __future__ import annotations

from dataclasses import dataclass

from mcm_tasks.api import Machine
from mcm_tasks.controllers.common.context import ClassContext
from mcm_tasks.controllers.common.scope import ObjectName, PassScope


@dataclass(kw_only=True)
class MachineScope(PassScope[Machine]):
    """One pass over one Machine; ``machine`` is the object as last read or written in the pass."""

    #: the class with its secrets, once the class phase has read and validated it
    class_context: ClassContext | None = None

    machine = ObjectName[Machine]()
