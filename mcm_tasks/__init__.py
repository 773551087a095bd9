"""mcm-tasks: Gardener's Machine Controller Manager as Celery tasks on Redis."""

from mcm_tasks.import_weight import defer_kubernetes_parts

__version__ = "0.1.0"

defer_kubernetes_parts()  # before anything of ours imports the client (mcm_tasks/import_weight.py)
