"""List+watch of the control and target clusters, the Redis mirror, event routing, leader election.

Run as ``mcm-tasks informer``. One active replica (Lease ``mcm-tasks-informer``) lists and watches
every resource the controllers read, writes each object into the Redis mirror that tasks read
through ``mcm_tasks.cache``, and enqueues the keys each event concerns (``informers.routing``).
"""

#: ``rkey(*SYNCED_KEY_PARTS)`` exists once the informer has listed every resource into the mirror
#: (the mirror's sentinel; it vanishes when Redis loses its data, until the re-list completes)
SYNCED_KEY_PARTS = ("cache", "sentinel")
