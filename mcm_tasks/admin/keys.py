"""One key's state, put together from everything Redis holds about it: the mirror (does the object
exist), the queue contract (waiting, delayed, running, failing) and the key's history."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import redis
from pydantic import BaseModel

from mcm_tasks.cache.reader import get_reader
from mcm_tasks.controllers.safety import APISERVER, ORPHAN_VMS, OVERSHOOTING
from mcm_tasks.kinds import OF_QUEUE, QUEUES, Queue
from mcm_tasks.queue import state as queue_state
from mcm_tasks.queue.history import Run, history_key, read_history
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.redisdb import get_redis

#: the safety queue's keys name jobs, not objects
SAFETY_JOBS = (APISERVER, ORPHAN_VMS, OVERSHOOTING)


class NotFound(LookupError):
    """An unknown kind, or a key nothing knows about (exit 2 in the CLI)."""


class KeyState(BaseModel):
    kind: str
    key: str
    #: idle | waiting | delayed | running | failing (the most pressing; the fields say the rest)
    state: str
    #: the state in words, one line per fact
    summary: list[str]
    in_mirror: bool
    waiting: bool
    delayed_until: float | None
    running: queue_state.Running | None
    running_on: str | None
    failing: queue_state.Failing | None
    history: list[Run]


def check_kind(kind: str) -> str:
    if kind not in QUEUES:
        raise NotFound(f"unknown kind {kind!r}; one of {', '.join(QUEUES)}")
    return kind


def exists(kind: str, key: str) -> bool:
    """The object is in the mirror (or, on the safety queue, the key is a job)."""
    if kind == Queue.SAFETY:
        return key in SAFETY_JOBS
    return get_reader().get(OF_QUEUE[Queue(kind)].mirror, key) is not None


def when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(t: float, now: float) -> str:
    return f"{now - t:.1f}s ago" if now >= t else f"in {t - now:.1f}s"


def worker_of(kind: str, running: queue_state.Running, client: redis.Redis | None = None) -> str | None:
    """The worker running it: the key's newest history entry if it belongs to the same message."""
    history = read_history(kind, running.key, client)
    if history and history[0].id == running.message_id:
        return history[0].worker
    return None


def inspect_key(kind: str, key: str, client: redis.Redis | None = None) -> KeyState:
    client = client or get_redis()
    check_kind(kind)
    qk = queue_keys(kind)
    pipe = client.pipeline(transaction=False)
    pipe.hexists(qk.pending, key)
    pipe.exists(history_key(kind, key))
    waiting, has_history = pipe.execute()
    due = queue_state.due_of(kind, key, client)
    run = next((r for r in queue_state.running(kind, client) if r.key == key), None)
    failing = next((f for f in queue_state.failing(kind, client) if f.key == key), None)
    in_mirror = exists(kind, key)
    if not (in_mirror or waiting or has_history or due is not None or run or failing):
        raise NotFound(f"no {kind} {key!r}: not in the mirror, never queued")
    history = read_history(kind, key, client)
    now = time.time()
    summary: list[str] = []
    on = None
    if run is not None:
        on = worker_of(kind, run, client)
        summary.append(f"running on {on or 'message ' + run.message_id} since {when(run.started)} "
                       f"({_ago(run.started, now)})")  # fmt: skip
    if failing is not None:
        held = " (quarantined: its worker died repeatedly)" if failing.quarantined else ""
        summary.append(
            f"failing {failing.count} times since {when(failing.since)}{held}: "
            f"{failing.error}: {failing.message}; next retry {_ago(failing.retry_at, now)}"
        )
    if waiting:
        summary.append("waiting: a message is queued")
    if due is not None:
        summary.append(f"delayed until {when(due)} ({_ago(due, now)})")
    if not summary:
        summary.append("idle")
    if not in_mirror:
        summary.append("not in the mirror (deleted, or not synced yet)")
    facts = (("running", run), ("failing", failing), ("waiting", waiting), ("delayed", due is not None))
    current = next((name for name, held in facts if held), "idle")
    return KeyState(
        kind=kind, key=key, state=current, summary=summary, in_mirror=in_mirror, waiting=bool(waiting),
        delayed_until=due, running=run, running_on=on, failing=failing, history=history,
    )  # fmt: skip
