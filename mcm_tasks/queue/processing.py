"""One delivery of a reconcile message: begin (lock or mark dirty), reconcile, end (unlock, requeue,
re-add if dirty). Two script calls around the reconciler; nothing else touches Redis."""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

import orjson
import redis

from mcm_tasks.logs import log_context
from mcm_tasks.queue import concurrency, history, scripts
from mcm_tasks.queue.messages import build_message, new_id
from mcm_tasks.queue.policy import (
    Action,
    Outcome,
    describe,
    error_summary,
    outcome_of_error,
    outcome_of_result,
)
from mcm_tasks.queue.producer import scripts_for
from mcm_tasks.queue.registry import get_reconciler
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import get_settings

log = logging.getLogger(__name__)


class NoReconciler(RuntimeError):
    """The worker has no reconciler for this kind: a deployment error, parked like any failure."""


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


def process(kind: str, key: str, message_id: str, delayed: bool, client: redis.Redis | None = None) -> str:
    """Run the contract around the kind's reconciler; the status of this delivery (``run`` when
    the reconciler ran, else why it did not)."""
    return deliver(kind, key, message_id, delayed, client).status


def deliver(
    kind: str,
    key: str,
    message_id: str,
    delayed: bool,
    client: redis.Redis | None = None,
    worker: str | None = None,
) -> Delivery:
    """Run the contract around the kind's reconciler, record the run in the key's history, and
    say what happened (the task shell turns it into Flower's result or FAILURE)."""
    settings = get_settings()
    client = client or get_redis()
    kind_scripts = scripts_for(kind, settings)
    started = time.time()
    status, failures_text = kind_scripts.begin(
        client, (), [key, message_id, started, "1" if delayed else "0"]
    )
    if isinstance(status, bytes):  # a client without decode_responses
        status, failures_text = status.decode(), failures_text.decode()
    if status != "run":
        if status == "dead":
            log.error("%s %s dead-lettered: its worker died %s times in a row", kind, key, failures_text)
            return Delivery(
                str(status),
                Outcome(Action.DEAD, failures=int(failures_text)),
                ("WorkerLost", f"the worker died {failures_text} times in a row during this reconcile"),
            )
        log.debug("%s %s: %s", kind, key, status)
        return Delivery(str(status))

    entry = ""
    if not concurrency.acquire(client, kind, message_id, settings):
        # every --concurrent-syncs slot of this kind is busy across the fleet: hand the key back
        # (unlocked, no failure counted) to come back shortly
        outcome = Outcome(Action.REQUEUE, after=concurrency.SLOT_RETRY)
        _finish(client, kind_scripts, kind, key, message_id, started, int(failures_text), outcome, entry)
        return Delivery("busy", text=f"skipped: every --concurrent-syncs slot of {kind} busy")

    run = history.Run(id=message_id, start=started, worker=history.worker_name(worker))
    with contextlib.suppress(redis.RedisError):  # the history is for people; never fail a run for it
        history.record_start(client, kind, key, run)
    error: tuple[str, str] | None = None
    with log_context(kind, key):
        try:
            reconciler = get_reconciler(kind)
            if reconciler is None:
                raise NoReconciler(f"no reconciler registered for {kind!r} in this worker")
            outcome = outcome_of_result(reconciler(key), settings)
        except Exception as exc:  # a reconciler's failure is data for the contract, not a task failure
            outcome = outcome_of_error(int(failures_text), settings)
            error = error_summary(exc)
            if outcome.action is Action.DEAD:
                log.error("%s %s failed %d times, dead-lettered: %s: %s", kind, key, outcome.failures, *error)
                entry = dead_letter_entry(kind, key, *error, outcome.failures)
            else:
                log.warning(
                    "%s %s failed (%d), retry in %.3fs: %s: %s",
                    kind,
                    key,
                    outcome.failures,
                    outcome.after,
                    *error,
                )
        finally:
            concurrency.release(client, kind, message_id, settings)
    done = run.model_copy(
        update={
            "end": time.time(),
            "outcome": describe("run", outcome),
            "error": ": ".join(error) if error else "",
        }
    )
    _finish(client, kind_scripts, kind, key, message_id, started, int(failures_text), outcome, entry, done)
    return Delivery("run", outcome, error)


def dead_letter_entry(kind: str, key: str, error: str, message: str, count: int) -> str:
    return orjson.dumps(
        {"kind": kind, "key": key, "error": error, "message": message, "count": count, "time": time.time()}
    ).decode()


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
    run: history.Run | None = None,
) -> None:
    queue = get_settings().queue_name(kind)
    now = time.time()
    # the message for a re-add at once (dirty key, or requeue after 0) is always ready, so that the
    # script can decide and publish in the same atomic step
    now_id = new_id()
    now_message = build_message(kind, key, now_id, queue)
    due, later_id, later_message = "", "", ""
    if outcome.action in (Action.REQUEUE, Action.RETRY) and outcome.after > 0:
        due_at = now + outcome.after
        later_id = new_id()
        later_message = build_message(kind, key, later_id, queue, eta=due_at)
        due = repr(due_at)
    fields = "|".join(
        (repr(now), repr(started), outcome.action.value, due, later_id, now_id, str(failures_before))
    )
    calls = [(kind_scripts.end, [key, message_id, fields, entry, later_message, now_message])]
    if run is not None:  # the key's history, in the same round trip
        calls.append(history.finish_call(kind, key, run))
    scripts.run_pipeline(client, calls)
