"""The beat schedule of the safety jobs (upstream ``machine_safety.go``), built from the settings.

One entry per job, each a reconcile of its key on the ``safety`` queue: orphan-VM collection every
``machine_safety_orphan_vms_period``, the API-server health check every
``machine_safety_apiserver_statuscheck_period``, overshooting every
``machine_safety_overshooting_period``. A period of 0 turns the job's schedule off (the informer's
triggers still run it). While the API-server check's period equals the overshooting check's, it
has no entry: the overshooting job runs it (``controllers.safety.apiserver_rides``). Entries are
plain Celery beat entries, so any beat can read them, but ``mcm-tasks beat`` does not publish them
as ordinary messages: it hands the (kind, key) to the queue contract (``job_of``), so a schedule
that fires while the same job is already waiting coalesces with it instead of queueing a second run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Final

from mcm_tasks.controllers.safety import APISERVER, JOB_PERIODS, apiserver_rides
from mcm_tasks.kinds import QUEUES, Queue
from mcm_tasks.queue.messages import TASK_PREFIX, task_name
from mcm_tasks.settings import Settings, get_settings

SAFETY_KIND: Final = Queue.SAFETY
#: entry name = this prefix + the job's key
ENTRY_PREFIX: Final = "safety-"


def beat_schedule(settings: Settings | None = None) -> dict[str, dict[str, Any]]:
    s = settings or get_settings()
    schedule: dict[str, dict[str, Any]] = {}
    for key, setting in JOB_PERIODS.items():
        period = float(getattr(s, setting))
        if period <= 0 or (key == APISERVER and apiserver_rides(s)):
            continue
        schedule[ENTRY_PREFIX + key] = {
            "task": task_name(SAFETY_KIND),
            "schedule": timedelta(seconds=period),
            "args": (key,),
            "options": {"queue": s.queue_name(SAFETY_KIND)},
        }
    return schedule


def job_of(task: str, args: Sequence[Any] | None) -> tuple[str, str] | None:
    """The (kind, key) an entry reconciles, or None for an entry that is not a reconcile."""
    if not task.startswith(TASK_PREFIX) or not args or len(args) != 1 or not isinstance(args[0], str):
        return None
    kind = task.removeprefix(TASK_PREFIX)
    return (kind, args[0]) if kind in QUEUES else None
