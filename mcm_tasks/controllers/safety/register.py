"""Wires the safety jobs into the queue contract: one reconciler for the ``safety`` queue that runs
the job its key names. The contract already gives each key what the jobs need: one run at a time
across all workers, coalesced triggers (beat and the informer may ask for the same job at once),
and backoff when a job raises. What it cannot give is a limit on how often a key runs when its
events arrive one after another; ``debounce`` adds that for the jobs the informer triggers."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from mcm_tasks.controllers.common.drainrules_io import validate_rules
from mcm_tasks.controllers.common.registration import register as register_reconciler
from mcm_tasks.controllers.common.registration import scoped
from mcm_tasks.controllers.safety import (
    APISERVER,
    DRAIN_RULES,
    ORPHAN_VMS,
    OVERSHOOTING,
    apiserver_rides,
    debounce_io,
)
from mcm_tasks.controllers.safety.apiserver_io import check_apiservers
from mcm_tasks.controllers.safety.orphans_io import collect_orphans
from mcm_tasks.controllers.safety.overshooting_io import check_overshooting
from mcm_tasks.controllers.safety.scope import SafetyScope
from mcm_tasks.kinds import Queue
from mcm_tasks.queue import Requeue, enqueue_after

log = logging.getLogger(__name__)


def _orphan_vms(scope: SafetyScope) -> Requeue | None:
    collect_orphans(scope)
    return None


def _overshooting(scope: SafetyScope) -> Requeue | None:
    """The API-server check while it rides on this job (``apiserver_rides``), the overshooting check,
    then the drain rules' ``Valid`` conditions; the riders once per period, instead of beat entries of
    their own (two tasks fewer per namespace and minute).

    The probe goes first: with the control API server down, the overshooting check or the rules'
    LIST fail, and the freeze must not wait on them. The re-check a failed probe asks for (just after
    the freeze timeout) runs under the ``apiserver`` key, which does no overshooting check; the
    periodic checks that follow, frozen or not, are this job's."""
    settings = scope.settings
    period = settings.machine_safety_overshooting_period
    if apiserver_rides(settings) and debounce_io.apiserver_due(period):
        recheck = check_apiservers(scope)
        if recheck is not None:
            enqueue_after(Queue.SAFETY, APISERVER, recheck.after)
    check_overshooting(scope)
    if debounce_io.drain_rules_due(period):
        validate_rules(scope, settings.namespace)
    return None


def _drain_rules(scope: SafetyScope) -> Requeue | None:
    validate_rules(scope, scope.settings.namespace)
    return None


#: each job by its key; a job runs in the ``SafetyScope`` registration built for its pass
JOBS: dict[str, Callable[[SafetyScope], Requeue | None]] = {
    ORPHAN_VMS: _orphan_vms,
    OVERSHOOTING: _overshooting,
    APISERVER: check_apiservers,
    DRAIN_RULES: _drain_rules,
}


def _job_of(key: str) -> str | None:
    """The job a key names; None (the key dropped) for no job."""
    if key not in JOBS:
        log.warning("safety: no job named %r (known: %s); dropped", key, ", ".join(sorted(JOBS)))
        return None
    return key


def safety_pass(scope: SafetyScope) -> Requeue | None:
    """Run the scope's job, unless it is one the informer triggers and it ran within the interval."""
    key, job = scope.key, JOBS[scope.job]
    interval = scope.settings.safety_event_min_interval
    if key not in debounce_io.COALESCED or interval <= 0:
        return job(scope)
    wait = debounce_io.wait_before_run(key)
    if wait is not None:
        log.debug("safety: %s ran less than %.0fs ago; runs again in %.2fs", key, interval, wait)
        return Requeue(wait)
    started = time.monotonic()
    result = job(scope)
    debounce_io.close_window(key, interval, time.monotonic() - started)
    return result


#: the ``safety`` queue's reconciler: the job's scope (``SafetyScope``), then ``safety_pass``
reconcile_safety = scoped(_job_of, safety_pass, SafetyScope.begin)


def register() -> None:
    register_reconciler(Queue.SAFETY, reconcile_safety)


register()
