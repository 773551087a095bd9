"""The scope of one machine pass (``common.scope.PassScope``): the Machine read at the start of the
pass (upstream's ``machine`` argument of ``reconcileClusterMachine`` and ``triggerDeletionFlow``), its
class context once the class phase has read it, and the controller's clients, listers, recorder and
settings. The machine and the deletion reconcilers are built on it by ``registration.scoped``.

What several steps of a pass read again (the machine's class, its Node) is read once and held here,
decoded: the mirror's per-pass read memo (``CacheReader.remembering_synced``) already spares the
Redis round trips, but each read still decoded and parsed the object afresh. A Node the pass writes is
held as the API server answered the write, so a later step sees the pass's own change (a Failed
machine's ``Terminating`` condition, set before the drain, is not taken for absent by the drain)."""

from __future__ import annotations

from dataclasses import dataclass

from mcm_tasks.api import Machine, MachineClass, MachinePhase, Obj
from mcm_tasks.api.constants import NODE_LABEL_KEY
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.context_io import ClassContext
from mcm_tasks.controllers.common.lagging_io import mirror_lagging
from mcm_tasks.controllers.common.scope import ObjectName, PassScope
from mcm_tasks.settings import get_settings


@dataclass(kw_only=True)
class MachineScope(PassScope[Machine]):
    """One pass over one Machine; ``machine`` is the object as last read or written in the pass."""

    #: the class with its secrets, once the class phase has read and validated it
    class_context: ClassContext | None = None

    machine = ObjectName[Machine]()

    @staticmethod
    def read(key: str) -> Machine | None:
        """The machine a pass over ``key`` is about, read before its scope is built (so with the
        process's client and settings): the mirror when it is complete, else the API server; from
        the API server while the mirror lags (``lagging_io.mirror_lagging``), as the pass that wrote
        it may have woken this one before the watch brought the change (``lagging_io.wake``)."""
        settings = get_settings()
        namespace, name = context_io.namespace_of(key, settings.namespace)
        return context_io.get_machine(
            context_io.control_api(), name, namespace, lagging=mirror_lagging(settings)
        )

    def machine_class(self) -> MachineClass | None:
        """The machine's class without its secrets (None when it names none or it does not exist),
        read once per pass."""
        name = self.machine.spec.class_.name
        if not name:
            return None
        namespace = self.machine.metadata.namespace or self.settings.namespace
        return self.remember(
            f"class:{namespace}/{name}", lambda: context_io.get_machine_class(self.api, name, namespace)
        )

    def node_name(self) -> str:
        """The Node the machine's ``node`` label names ("" when it has none)."""
        return self.machine.metadata.labels.get(NODE_LABEL_KEY, "")

    def node(self) -> Obj | None:
        """The Node the ``node`` label names (an API dict; None when absent, unnamed or in no-target
        mode): read once per pass, then as the pass's own writes to it left it (``node_written``).
        Shared within the pass: read-only."""
        name = self.node_name()
        if not name:
            return None
        # while the mirror lags the machine was read from the API server (``MachineScope.read``): its
        # Node too, or a machine that just joined would find its Node "missing" in the late mirror
        if mirror_lagging(self.settings):
            found: Obj | None = self.remember(
                f"node:{name}", lambda: context_io.get_node_live(self.target, name)
            )
        else:
            found = self.remember(f"node:{name}", lambda: context_io.get_node(self.target, name))
        return found

    def waits_under_lag(self) -> bool:
        """A Pending machine (waiting for its Node to join) while the mirror lags: its pass comes back
        every ``--mirror-lag-node-poll`` to read the Node from the API server instead of waiting for
        the Node's events, which arrive as late as the mirror (issue 29)."""
        return self.machine.status.current_status.phase == MachinePhase.PENDING and mirror_lagging(
            self.settings
        )

    def node_written(self, answer: Obj | None) -> None:
        """Hold the API server's answer to a write of a Node as the pass's view of it (None: nothing
        was written, the view stays)."""
        if answer is not None:
            self.memo[f"node:{(answer.get('metadata') or {}).get('name') or ''}"] = answer
