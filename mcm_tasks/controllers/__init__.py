"""The controllers: plain modules of pure decisions over the API models, with the I/O (cache reads,
API writes, provider calls) at their edges. Each registers its reconcilers with the queue contract
(``mcm_tasks.queue.register_reconciler``) when its ``register`` module is imported."""
