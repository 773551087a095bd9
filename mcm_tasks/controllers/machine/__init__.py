"""The machine controller (MCM's "MC"): Machines, and the MachineClasses, Secrets and Nodes around them.

Modules, one per phase: ``reconcile`` is upstream ``reconcileClusterMachine``'s order, ``create`` the
creation flow, ``health`` (decides) and ``health_io`` (acts) the health check, ``nodesync`` the node
syncing, ``bootstrap`` the bootstrap token, ``preserve`` machine preservation,
``classes``/``secrets``/``nodes`` the other kinds, ``metrics`` the ``mcm_machine_*`` series and
``register`` the queue wiring; deletion and drain live in ``deletion`` and the ``drain`` package. Reads
and the status writer are shared with the other controllers in ``controllers.common``.
"""
