"""mcm-tasks: Gardener's Machine Controller Manager as Celery tasks on Redis."""

__version__ = "0.1.0"
