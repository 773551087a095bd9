"""The MachineDeployment controller: rolls machines from one template to the next through
MachineSets, like a Deployment does with ReplicaSets.

Pure decisions: ``hash`` (which template a set stands for), ``revisions``, ``scaling`` (the budgets
and proportional scaling), ``rolling`` / ``recreate`` / ``rollback`` (each strategy's next step),
``progress`` and ``status`` (conditions and status), ``taints`` and ``trigger`` (their decisions).
``watches`` says which updates wake a deployment. Writes: ``control`` (reads and writes of one
pass), ``sets``, ``sync``, ``inplace`` (the InPlaceUpdate strategy), ``reconcile``; ``seen`` is what a
worker process remembers between a rollout's passes; ``metrics`` exposes MCM's
``mcm_machine_deployment_*``; importing ``register`` registers the reconciler for the
``machinedeployment`` queue.
"""
