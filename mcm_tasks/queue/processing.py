"""One delivery of a reconcile message: begin (lock or mark dirty), reconcile, end (unlock, requeue,
re-add if dirty). Two script calls around the reconciler, one round trip each (the key's history
and the --concurrent-syncs slot are steps of the same scripts); a failure adds one read of the
key's failing entry, and the Warning Events go through the kind's failure reporter."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from mcm_tasks.logs import log_context
from mcm_tasks.queue import concurrency, history, registry, scripts
from mcm_tasks.queue.messages import build_message, new_id, queue_keys
from mcm_tasks.queue.policy import (
    Action,
    Outcome,
    describe,
    due_at,
    error_summary,
    outcome_of_error,
    outcome_of_result,
)
from mcm_tasks.queue.producer import scripts_for
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import get_settings
from mcm_tasks.standby import UPSTREAM_RETRY_PERIOD

log = logging.getLogger(__name__)

#: Event reasons on the object of a failing key
FAILED_REASON = "ReconcileFailed"
QUARANTINED_REASON = "ReconcileQuarantined"
WORKER_LOST = "WorkerLost"


class NoReconciler(RuntimeError):
    """The worker has no reconciler for this kind: a deployment error, retried like any failure."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one delivery did: BEGIN's status, and for a run its outcome and error (if it failed)."""

    status: str
    outcome: Outcome | None = None
    #: (error class, redacted message) of a failed run
    error: tuple[str, str] | None = None
    #: the words for a delivery that did not run for a reason of its own
    text: str = ""

    def describe(self) -> str:
        return self.text or describe(self.status, self.outcome)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def process(kind: str, key: str, message_id: str, client: redis.Redis | None = None) -> str:
    """Run the contract around the kind's reconciler; the status of this delivery (``run`` when
    the reconciler ran, else why it did not: ``busy``, ``duplicate``, ``quarantined``, ``standby``)."""
    return deliver(kind, key, message_id, client).status


def deliver(
    kind: str,
    key: str,
    message_id: str,
    client: redis.Redis | None = None,
    worker: str | None = None,
) -> Delivery:
    """Run the contract around the kind's reconciler, record the run in the key's history, and
    say what happened (the task shell turns it into Flower's result or FAILURE)."""
    settings = get_settings()
    client = client or get_redis()
    kind_scripts = scripts_for(kind, settings)
    started = time.time()
    runner = history.worker_name(worker)
    # BEGIN also takes a --concurrent-syncs slot and adds the run's start to the key's history
    start = history.entry(message_id, started, runner) if settings.history_length else ""
    ahead = registry.read_ahead(kind)
    keys, fields = _plan(ahead, kind, key)
    reply = kind_scripts.begin(client, keys, [key, message_id, started, start, *fields])
    status, failures_text, recovered, previous_error, slot, seen_due = (_text(v) for v in reply[:6])
    standing_by = len(reply) > 6 and _text(reply[6]) == "1"
    found = reply[7] if len(reply) > 7 and keys else None
    failures_before = int(failures_text)
    if recovered == "1":
        _recovered(kind, key, status, failures_before, previous_error)
    if status != "run":
        log.debug("%s %s: %s", kind, key, status)
        return Delivery(status)

    entry = ""
    if standing_by:
        # a Go MCM holds upstream's Lease (a swap in progress; BEGIN saw the marker): hand the key
        # back unrun (no failure counted); keepers publish it again once the standby is over
        outcome = Outcome(Action.REQUEUE, after=UPSTREAM_RETRY_PERIOD)
        _finish(client, kind_scripts, kind, key, message_id, started, failures_before, outcome, entry, "")
        return Delivery("standby", text="skipped: standing by, a Go MCM holds upstream's Lease")
    if slot == "0":
        # every --concurrent-syncs slot of this kind is busy across the fleet: hand the key back
        # (unlocked, no failure counted) to come back shortly
        outcome = Outcome(Action.REQUEUE, after=concurrency.SLOT_RETRY)
        _finish(client, kind_scripts, kind, key, message_id, started, failures_before, outcome, entry, "")
        return Delivery("busy", text=f"skipped: every --concurrent-syncs slot of {kind} busy")

    error: tuple[str, str] | None = None
    with log_context(kind, key):
        try:
            reconciler = registry.get_reconciler(kind)
            if reconciler is None:
                raise NoReconciler(f"no reconciler registered for {kind!r} in this worker")
            with registry.around_pass():
                if ahead is not None and found:
                    _seed(ahead, kind, key, found)
                result = reconciler(key)
            outcome = outcome_of_result(result, settings)
        except Exception as exc:  # a reconciler's failure is data for the contract, not a task failure
            outcome = outcome_of_error(failures_before, settings)
            error = error_summary(exc)
            entry = _failed(client, kind, key, error, outcome)
        else:
            if failures_before:
                _recovered_from_failures(client, kind, key)
    done = history.entry(
        message_id, started, runner, time.time(), describe("run", outcome), ": ".join(error) if error else ""
    ) if settings.history_length else ""  # fmt: skip
    _finish(
        client, kind_scripts, kind, key, message_id, started, failures_before, outcome, entry, done, seen_due
    )
    return Delivery("run", outcome, error)


def _plan(ahead: registry.ReadAhead | None, kind: str, key: str) -> tuple[Sequence[str], Sequence[str]]:
    """BEGIN's read-ahead for this key (``registry.ReadAhead``); none when the kind has none or its
    plan fails (a garbage key: the pass says so itself)."""
    if ahead is None:
        return (), ()
    try:
        return ahead.plan(key)
    except Exception:
        log.debug("%s %s: no read-ahead", kind, key, exc_info=True)
        return (), ()


def _seed(ahead: registry.ReadAhead, kind: str, key: str, found: Sequence[Any]) -> None:
    """Hand the pass what BEGIN read; a read-ahead that cannot be handed over only costs the pass its
    own read."""
    try:
        ahead.seed(key, found)
    except Exception:
        log.debug("%s %s: read-ahead not seeded", kind, key, exc_info=True)


def _recovered(kind: str, key: str, status: str, failures: int, previous_error: str) -> None:
    """The key's previous run died mid-reconcile (its worker was killed, or it overran the lock):
    this message is its redelivery, or another message of the key that came first once the dead
    run's lock expired. What that run promised is re-checked before the key runs again, and the
    object hears of it once per streak."""
    settings = get_settings()
    if status == "quarantined":
        log.error("%s %s quarantined: its worker died %s times in a row during its reconcile; "
                  "retried after long-retry", kind, key, settings.poison_after)  # fmt: skip
        _report(kind, key, QUARANTINED_REASON,
                f"{WORKER_LOST}: the worker died during the reconcile {settings.poison_after} "
                f"times in a row; retried every {settings.long_retry:g}s")  # fmt: skip
        return
    log.warning("%s %s: its previous reconcile died with its worker; running it again", kind, key)
    for hook in registry.recovery_hooks(kind):
        try:
            hook(key)
        except Exception:
            log.exception("%s %s: recovery hook %s failed", kind, key, getattr(hook, "__name__", hook))
    if failures == 1 or previous_error != WORKER_LOST:
        _report(kind, key, FAILED_REASON, f"{WORKER_LOST}: the worker died during the reconcile")


def _recovered_from_failures(client: redis.Redis, kind: str, key: str) -> None:
    """A failure streak ended. If its Warning could not be written during it (every write refused,
    as in an API-server outage), it is written now, so the object still tells what happened."""
    previous = _previous(client, kind, key)
    if previous is not None and previous.get("reported") is False:
        _report(kind, key, FAILED_REASON,
                f"{previous.get('error')}: {previous.get('message')} "
                f"({previous.get('count')} failures in a row, then recovered)")  # fmt: skip


def _failed(client: redis.Redis, kind: str, key: str, error: tuple[str, str], outcome: Outcome) -> str:
    """Log a failure, warn the object on the first failure of a streak and on every change of
    error; the key's new failing entry (JSON)."""
    now = time.time()
    previous = _previous(client, kind, key)
    log.warning("%s %s failed (%d), retry in %.3fs: %s: %s",
                kind, key, outcome.failures, outcome.after, *error)  # fmt: skip
    changed = previous is None or (previous.get("error"), previous.get("message")) != error
    reported = True
    if changed or (previous is not None and previous.get("reported") is False):
        reported = _report(kind, key, FAILED_REASON, ": ".join(error))
    since = previous.get("since", now) if previous else now
    return failing_entry(
        kind, key, *error, outcome.failures, since, now, now + outcome.after, reported=reported
    )


def _previous(client: redis.Redis, kind: str, key: str) -> dict[str, object] | None:
    raw = client.hget(queue_keys(kind).failing, key)
    if not raw:
        return None
    try:
        found = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return found if isinstance(found, dict) else None


def _report(kind: str, key: str, reason: str, message: str) -> bool:
    """Best effort, as Events are: a reporter that fails is logged, never raised into the contract.
    Whether the report was made (no reporter: nothing is owed)."""
    reporter = registry.failure_reporter(kind)
    if reporter is None:
        return True
    try:
        return bool(reporter(key, reason, message))
    except Exception:
        log.exception("%s %s: could not report %s", kind, key, reason)
        return False


def failing_entry(
    kind: str, key: str, error: str, message: str, count: int, since: object, now: float, retry_at: float,
    *, reported: bool = True,
) -> str:  # fmt: skip
    """The JSON of a failing key (read back by ``state.Failing``); ``reported``: its Warning Event
    was written (else it is owed)."""
    return orjson.dumps(
        {"kind": kind, "key": key, "error": error, "message": message, "count": count,
         "since": since, "time": now, "quarantined": False, "retry_at": retry_at, "reported": reported}
    ).decode()  # fmt: skip


def _finish(
    client: redis.Redis,
    kind_scripts: scripts.KindScripts,
    kind: str,
    key: str,
    message_id: str,
    started: float,
    failures_before: int,
    outcome: Outcome,
    entry: str,
    run: str,
    seen_due: str = "",
) -> None:
    """END, which also completes the key's history (``run``: the finished run's entry; "" drops its
    start) and gives back the delivery's --concurrent-syncs slot. ``seen_due``: the key's due time
    BEGIN saw; a requeue replaces it if it is still there (scheduled before the run began, e.g. a
    Pending machine's ShortRetry health recheck outliving its join), where otherwise the earliest
    due time wins. A delivery that did not run passes "" and replaces nothing."""
    queue = get_settings().queue_name(kind)
    now = time.time()
    # the message for a re-add at once (dirty key, or requeue after 0) is always ready, so that the
    # script can decide and publish in the same atomic step
    now_id = new_id()
    now_message = build_message(kind, key, now_id, queue)
    due = ""
    if outcome.action in (Action.REQUEUE, Action.RETRY) and outcome.after > 0:
        due = repr(due_at(now, outcome.after))
    fields = "|".join(
        (repr(now), repr(started), outcome.action.value, due, now_id, str(failures_before), seen_due)
    )
    kind_scripts.end(client, (), [key, message_id, fields, entry, now_message, run])
