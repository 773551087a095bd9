"""The machine controller (MCM's "MC"): Machines, and the MachineClasses, Secrets and Nodes around them.

Modules, one per phase (a name ending in ``_io`` acts, the others decide): ``reconcile`` is upstream
``reconcileClusterMachine``'s order, ``create_io`` the creation flow, ``health`` and ``health_io`` the
health check, ``nodesync`` the node syncing, ``bootstrap_io`` the bootstrap token, ``preserve_io``
machine preservation, ``inplace_io`` the in-place update step,
``classes``/``secrets``/``nodes`` the other kinds, ``metrics`` the ``mcm_machine_*`` series and
``register`` the queue wiring; deletion and drain live in ``deletion`` and the ``drain`` package. Reads
and the status writer are shared with the other controllers in ``controllers.common``.
"""
