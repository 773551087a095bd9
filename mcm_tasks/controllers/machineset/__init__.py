"""The MachineSet controller: keeps ``spec.replicas`` machines of one template, like a ReplicaSet.

``replicas`` (the diff, slow-start batches, deletion order), ``sync`` (in-place propagation),
``status``, ``conditions`` and ``metrics`` (MCM's ``mcm_machine_set_*`` gauges) decide; ``watches``
says which updates of a machine wake its set. ``control_io`` (the creates and deletes of
manageReplicas), ``sync_io``, ``status_io``, ``metrics_io`` (the stale-machine counter in Redis and
the scrape) and ``reconcile`` (the pass, with the claim of machines from
``controllers.common.claim_io``) act, within the pass ``scope``; importing ``register`` registers the
reconciler for the ``machineset`` queue.
"""
