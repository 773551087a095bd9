"""``mcm-tasks admin``: what the queues hold, what happened to one key, and the operator's levers
(replay, freeze). Reads go to Redis only (the mirror and the queue state); freeze and unfreeze patch
the object on the control cluster, as MCM's safety controller does."""
