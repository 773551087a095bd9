"""The machine controller (MCM's "MC"): Machines, and the MachineClasses, Secrets and Nodes around them.

Modules, one per phase: ``context`` loads what a reconcile needs, ``status`` writes what it decided,
``reconcile`` is the order of §4.1, ``create`` the creation flow, ``health`` the health check,
``nodesync`` the node syncing, ``bootstrap`` the bootstrap token, ``classes``/``secrets``/``nodes``
the other kinds, ``frozen`` the safety freeze flag, ``metrics`` the ``mcm_machine_*`` series and
``register`` the queue wiring. Deletion and drain live in ``deletion`` and ``drain*``.
"""
