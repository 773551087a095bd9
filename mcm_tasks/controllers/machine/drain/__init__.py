"""The node drain of the deletion flow (upstream ``drainNode`` and its helpers in ``drain.go``).

Pure modules decide: ``select`` (which pods, in which order), ``pods`` (one pod's eviction or
deletion and what the API server's answer means), ``volumes`` (detach checks), ``force`` (how hard
the drain is), ``rules`` (the MachineDrainRules and the pod label: order groups, Skip,
WaitCompleted), ``plan`` (one round: what is due, is it over). The ``_io`` modules act:
``cluster_io`` reads and writes the target cluster, ``state_io`` keeps the progress in Redis, and
``step_io.drain_step`` runs one bounded round per reconcile.
"""
