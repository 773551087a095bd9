"""The MachineDeployment controller: rolls machines from one template to the next through
MachineSets, like a Deployment does with ReplicaSets.

Pure decisions: ``hash`` (which template a set stands for), ``revisions``, ``scaling`` (the budgets
and proportional scaling), ``rolling`` / ``recreate`` / ``rollback`` / ``inplace`` (each strategy's
next step), ``sets`` (which set is new, its body, which old sets go), ``progress`` and ``status``
(conditions and status), ``taints`` and ``trigger`` (their decisions). ``watches`` says which
updates wake a deployment. Acting: ``scope`` (the pass's ``Context``: its reads and writes), and the
``_io`` modules that carry the decisions out through it (``sets_io``, ``sync_io``, ``rolling_io``,
``recreate_io``, ``rollback_io``, ``inplace_io``, ``taints_io``, ``trigger_io``), called by
``reconcile``; ``seen`` is what a worker process remembers between a rollout's passes; ``metrics``
exposes MCM's ``mcm_machine_deployment_*``; importing ``register`` registers the reconciler for the
``machinedeployment`` queue.
"""
