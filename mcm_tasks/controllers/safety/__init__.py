"""The safety controllers (upstream ``machine_safety.go``): jobs over the whole installation rather than one
object each.

They run on the ``safety`` queue under four keys, enqueued by beat every period (and at its start)
and by the informer on the events that make a check urgent:

- ``orphan-vms``: VMs no Machine accounts for are deleted from the cloud; Nodes no Machine backs are
  marked not managed by MCM (``orphans`` decides, ``orphans_io`` acts);
- ``apiserver``: the control and target API servers are probed; unreachable for longer than the
  status-check timeout freezes the machine controller, reachable again unfreezes it (``apiserver``
  decides, ``apiserver_io`` acts). While its period equals the overshooting check's (MCM's defaults:
  a minute each, ``apiserver_rides``), beat fires no entry of its own either: every ``overshooting``
  run probes first, once per period, and only the re-check a failed probe asks for (timed to land
  just after the freeze timeout) runs under this key. A probe may then come up to
  ``safety_event_min_interval`` late (beat's run waits for the debounce window of an event-triggered
  one), against a minute's period. Another task per namespace and minute fewer;
- ``overshooting``: a MachineSet with far more machines than its deployment allows is frozen (no
  scale-up) together with its deployment, and unfrozen once back under the lower threshold
  (``overshooting`` decides, ``overshooting_io`` acts);
- ``drain-rules`` (mcm-tasks's own): each ``MachineDrainRule`` gets its ``Valid`` condition, and an
  invalid one a Warning Event (``common.drainrules_io.validate_rules``). Every ``overshooting`` run
  does it as well, and beat fires no entry of its own: a task per namespace and minute fewer (in
  seed mode a third of the idle safety tasks); the key stays for a run on demand.

``reads_io`` lists what the jobs look at (the informers' mirror once synced, else the API server),
``register`` wires the jobs into the queue contract, and ``debounce_io`` folds the informer's bursts of
requests for one job into at most one full run per ``safety_event_min_interval``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from mcm_tasks.settings import Settings

#: the keys of the ``safety`` queue (the informer routes the first two on Machine events)
ORPHAN_VMS: Final = "orphan-vms"
OVERSHOOTING: Final = "overshooting"
APISERVER: Final = "apiserver"
#: mcm-tasks's own: every MachineDrainRule's ``Valid`` condition (not a safety check, a job over the
#: installation like them: it runs on their queue, and with every overshooting check)
DRAIN_RULES: Final = "drain-rules"

#: each job's key → the setting that holds its period
JOB_PERIODS: Final[dict[str, str]] = {
    ORPHAN_VMS: "machine_safety_orphan_vms_period",
    APISERVER: "machine_safety_apiserver_statuscheck_period",
    OVERSHOOTING: "machine_safety_overshooting_period",
}


def apiserver_rides(settings: Settings) -> bool:
    """Whether the ``overshooting`` job runs the API-server check (the two periods are equal and on)
    instead of beat firing an ``apiserver`` entry: one task per period instead of two, the same checks."""
    period = float(settings.machine_safety_apiserver_statuscheck_period)
    return period > 0 and period == float(settings.machine_safety_overshooting_period)
