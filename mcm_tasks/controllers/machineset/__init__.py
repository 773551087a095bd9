"""The MachineSet controller: keeps ``spec.replicas`` machines of one template, like a ReplicaSet.

``replicas`` (the diff, slow-start batches, deletion order), ``sync`` (in-place propagation) and
``status`` decide; ``watches`` says which updates of a machine wake its set; ``control`` (the
creates and deletes of manageReplicas) and ``reconcile`` (the pass, with the claim of machines from
``controllers.common.claim``) write, within the pass ``scope``; ``metrics`` exposes MCM's
``mcm_machine_set_*``; importing ``register`` registers the reconciler for the ``machineset`` queue.
"""
