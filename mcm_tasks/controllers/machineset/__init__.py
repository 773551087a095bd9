"""The MachineSet controller: keeps ``spec.replicas`` machines of one template, like a ReplicaSet.

``replicas`` (the diff, slow-start batches, deletion order), ``sync`` (in-place propagation) and
``status`` decide; ``claim``, ``control`` and ``reconcile`` write; ``metrics`` exposes MCM's
``mcm_machine_set_*``; importing ``register`` registers the reconciler for the ``machineset`` queue.
"""
