"""The MachineDeployment controller: rolls machines from one template to the next through
MachineSets, like a Deployment does with ReplicaSets.

Pure decisions: ``hash`` (which template a set stands for), ``revisions``, ``scaling`` (the budgets
and proportional scaling), ``rolling`` / ``recreate`` / ``rollback`` (each strategy's next step),
``progress`` and ``status`` (conditions and status), ``taints`` and ``trigger`` (their decisions).
Writes: ``control`` (reads and writes of one pass), ``sets``, ``sync``, ``reconcile``; ``metrics``
exposes MCM's ``mcm_machine_deployment_*``; importing ``register`` registers the reconciler for the
``machinedeployment`` queue.
"""
