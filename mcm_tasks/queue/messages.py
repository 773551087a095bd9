"""Redis key names of the contract and ready-to-push Celery messages.

The contract publishes by pushing a Celery (protocol 2, JSON) message onto the broker's list from
inside the same Lua script that decides to publish. That makes "mark the key pending" and "put its
message on the queue" one atomic step (a crash cannot leave a marker without a message) and lets
``enqueue_many`` publish a whole batch in one round trip instead of one ``apply_async`` each.
The message is what ``apply_async`` would produce for ``mcm.reconcile.<kind>(key)``; the
integration tests run it through real workers, so a format change in Celery shows up there.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from dataclasses import dataclass

import orjson

from mcm_tasks.kinds import QUEUES
from mcm_tasks.settings import Settings, get_settings

TASK_PREFIX = "mcm.reconcile."
_EMBED = '{"callbacks": null, "errbacks": null, "chain": null, "chord": null}'
_ORIGIN = f"mcm{os.getpid()}@{socket.gethostname()}"


def task_name(kind: str) -> str:
    return TASK_PREFIX + kind


def broker_prefix(settings: Settings | None = None) -> str:
    """kombu's ``global_keyprefix``: the broker's own keys live under the installation's prefix too
    (in seed mode the installation's, not a tenant's: every tenant's queues are one broker's)."""
    return f"{(settings or get_settings()).install_prefix}:broker:"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The Redis keys of one kind's queue."""

    kind: str
    pending: str  # hash key → "enqueued_at|message id": an immediate message is on its way
    locks: str  # hash key → "expires_at|started_at|message id": a reconcile is running
    dirty: str  # set of keys that got an event while locked
    delayed: str  # sorted set key → due time: client-go's delaying queue
    failures: str  # hash key → consecutive failures (the backoff exponent)
    failing: str  # hash key → JSON of the failure streak (state.Failing)
    deaths: str  # hash key → worker deaths in a row during the key's reconcile (poison detection)
    metrics: str  # hash of counters and histogram buckets
    broker_list: str  # the Celery queue (a Redis list)
    background_list: str  # its background (resync) priority's list, served after every queue's first
    aging: str  # sorted set message id → when it went onto background_list (its age, for aging)
    aging_index: str  # the installation's set of the aging sets that hold something (keeper duty 5)
    history: str  # + key: list of the key's last runs (history.py)
    floor: str  # + key: not before this time may a batched wake run the key (SCHEDULE_BATCHED)
    slots: str  # sorted set of the deliveries holding a --concurrent-syncs slot (concurrency.py)
    wake: str  # pub/sub channel: a due time earlier than its set's first (wake_channel)
    standby: str  # the standby marker (mcm_tasks.standby): a Go MCM holds upstream's Lease

    def as_list(self) -> list[str]:
        return [self.pending, self.locks, self.dirty, self.delayed, self.failures, self.failing,
                self.deaths, self.metrics, self.broker_list]  # fmt: skip


#: kombu's Redis transport keeps a queue's messages of priority p > 0 in ``<queue>\x06\x16<p>``, and
#: every BRPOP names each queue's priority-0 list before any queue's other lists: a message of
#: ``BACKGROUND_PRIORITY`` (an informer resync's) is taken only while no user-facing message waits
#: on any queue the worker consumes, and is promoted after ``--background-aging`` (``keeper``).
PRIORITY_SEP = "\x06\x16"
BACKGROUND_PRIORITY = 9
#: the transport's priority steps: user-facing (0) and background (``BACKGROUND_PRIORITY``) only,
#: so each BRPOP names two lists per queue instead of kombu's default four
PRIORITY_STEPS = [0, BACKGROUND_PRIORITY]

#: the lock holder that marks a quarantined key (a poison message): held until its retry is due
QUARANTINE = "quarantine"


def wake_channel(settings: Settings | None = None) -> str:
    """Pub/sub channel (all kinds): a script that schedules a key earlier than every key already
    waiting in its kind's delayed set publishes the due time here, so the keepers wake for it
    instead of polling the delayed sets several times a second (keeper.py)."""
    return f"{(settings or get_settings()).install_prefix}:q:wake"


def aging_index_key(settings: Settings | None = None) -> str:
    """Set (all kinds, every namespace of a seed): the aging sets that hold a background message.
    ENQUEUE_BACKGROUND adds its set, AGE removes it once empty, so a keeper's aging turn reads only
    the queues that have background work, not every kind of every namespace."""
    return f"{(settings or get_settings()).install_prefix}:q:aging-index"


def workers_key(settings: Settings | None = None) -> str:
    """Sorted set worker name → time of its last heartbeat."""
    return f"{(settings or get_settings()).install_prefix}:q:workers"


_keys_cache: dict[tuple[str, str], QueueKeys] = {}


def queue_keys(kind: str, settings: Settings | None = None) -> QueueKeys:
    s = settings or get_settings()
    cached = _keys_cache.get((s.key_prefix, kind))
    if cached is not None:
        return cached
    if kind not in QUEUES:
        raise ValueError(f"unknown queue kind {kind!r}; known: {', '.join(QUEUES)}")
    base = f"{s.key_prefix}:q:{kind}:"
    keys = QueueKeys(
        kind=kind,
        pending=base + "pending",
        locks=base + "locks",
        dirty=base + "dirty",
        delayed=base + "delayed",
        failures=base + "failures",
        failing=base + "failing",
        deaths=base + "deaths",
        metrics=base + "metrics",
        broker_list=broker_prefix(s) + s.queue_name(kind),
        background_list=broker_prefix(s) + s.queue_name(kind) + PRIORITY_SEP + str(BACKGROUND_PRIORITY),
        aging=base + "aging",
        aging_index=aging_index_key(s),
        history=base + "history:",
        floor=base + "floor:",
        slots=f"{s.key_prefix}:syncs:{kind}",
        wake=wake_channel(s),
        standby=f"{s.key_prefix}:standby",
    )
    _keys_cache[(s.key_prefix, kind)] = keys
    return keys


def new_id() -> str:
    return str(uuid.uuid4())


def build_message(kind: str, key: str, message_id: str, queue: str, priority: int = 0) -> str:
    """The JSON a kombu Redis producer would LPUSH for ``mcm.reconcile.<kind>(key)`` (its priority
    decides the list kombu restores it to)."""
    body = f"[[{json.dumps(key)}], {{}}, {_EMBED}]"
    return orjson.dumps(
        {
            "body": base64.b64encode(body.encode()).decode(),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {
                "lang": "py",
                "task": task_name(kind),
                "id": message_id,
                "shadow": None,
                "eta": None,
                "expires": None,
                "group": None,
                "group_index": None,
                "retries": 0,
                "timelimit": [None, None],
                "root_id": message_id,
                "parent_id": None,
                "argsrepr": repr((key,)),
                "kwargsrepr": "{}",
                "origin": _ORIGIN,
                "ignore_result": True,
                "replaced_task_nesting": 0,
                "stamped_headers": None,
                "stamps": {},
            },
            "properties": {
                "correlation_id": message_id,
                "reply_to": "",
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": queue},
                "priority": priority,
                "body_encoding": "base64",
                "delivery_tag": message_id + ".d",
            },
        }
    ).decode()
