"""The scope of one safety job's pass (``common.scope.PassScope``): the job its ``safety`` queue key names
(upstream's ``checkMachineClasses``/``AnnotateNodesUnmanagedByMCM``, ``checkAPIServerStatus``,
``reconcileClusterMachineSafetyOvershooting``), with the controller's clients, listers, recorder and
settings (upstream's ``safetyOptions``). Built by ``registration.scoped`` in ``register``."""

from __future__ import annotations

from dataclasses import dataclass

from mcm_tasks.controllers.common.scope import ObjectName, PassScope


@dataclass(kw_only=True)
class SafetyScope(PassScope[str]):
    """One run of one safety job; the scope's object is the job's name."""

    job = ObjectName[str]()
