"""Wires the safety jobs into the queue contract: one reconciler for the ``safety`` queue that runs
the job its key names. The contract already gives each key what the jobs need: one run at a time
across all workers, coalesced triggers (beat and the informer may ask for the same job at once),
and backoff when a job raises. What it cannot give is a limit on how often a key runs when its
events arrive one after another; ``debounce`` adds that for the jobs the informer triggers."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from mcm_tasks.controllers.common.registration import register as register_reconciler
from mcm_tasks.controllers.safety import APISERVER, ORPHAN_VMS, OVERSHOOTING, debounce
from mcm_tasks.controllers.safety.apiserver_io import check_apiservers
from mcm_tasks.controllers.safety.orphans_io import collect_orphans
from mcm_tasks.controllers.safety.overshooting_io import check_overshooting
from mcm_tasks.kinds import Queue
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import get_settings

log = logging.getLogger(__name__)


def _orphan_vms() -> Requeue | None:
    collect_orphans()
    return None


def _overshooting() -> Requeue | None:
    check_overshooting()
    return None


JOBS: dict[str, Callable[[], Requeue | None]] = {
    ORPHAN_VMS: _orphan_vms,
    OVERSHOOTING: _overshooting,
    APISERVER: check_apiservers,
}


def reconcile_safety(key: str) -> Requeue | None:
    job = JOBS.get(key)
    if job is None:
        log.warning("safety: no job named %r (known: %s); dropped", key, ", ".join(sorted(JOBS)))
        return None
    interval = get_settings().safety_event_min_interval
    if key not in debounce.COALESCED or interval <= 0:
        return job()
    wait = debounce.wait_before_run(key)
    if wait is not None:
        log.debug("safety: %s ran less than %.0fs ago; runs again in %.2fs", key, interval, wait)
        return Requeue(wait)
    started = time.monotonic()
    result = job()
    debounce.close_window(key, interval, time.monotonic() - started)
    return result


def register() -> None:
    register_reconciler(Queue.SAFETY, reconcile_safety)


register()
