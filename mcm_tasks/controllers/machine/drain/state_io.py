"""A drain's progress between reconciles: per pod, how often eviction was refused, when it was evicted,
whether its volumes detached; per drain, when it started and when the final detach check began.

Where it lives, and why: a Redis hash per machine (``<prefix>:drain:<namespace>/<name>``, field
``meta`` plus one ``pod:<namespace>/<name>`` field per pod, JSON), not an annotation on the Machine.

- It changes on almost every reconcile of a drain (a refused eviction every retry interval per pod);
  as an annotation each change would be a Machine write against the API budget the whole controller
  shares, for data nobody but this drain reads.
- Redis answers with what was written last; the Machine in the mirror may lag our own write, and a
  drain reading an old attempt count would repeat work.
- MCM's own state for the step (``status.lastOperation.description``) stays on the Machine, so what
  a person or another controller sees is exactly MCM's.

Losing the hash (Redis flushed or restarted, TTL expired) restarts the *current* drain from the pods
still on the node, and that is safe:

- attempt counters start over: more evictions, but the forced drain still comes at
  ``deletionTimestamp`` + drain timeout, which is read from the Machine, not from here;
- a pod still terminating is evicted again (the API server accepts evicting a terminating pod) and its
  wait starts over; a pod already gone is done, as it would have been;
- the one thing a fresh drain cannot know is that a *gone* pod's volumes were still detaching. Every
  normal drain therefore ends with a detach barrier (``volumes.detach_barrier``): it does not
  report success while VolumeAttachments on the node are left that no remaining pod uses, so a lost
  record never lets the VM be deleted under an attached volume.

The hash carries the Machine's uid (a Machine re-created under the same name starts afresh) and
expires a while after the drain would have been forced anyway, so a drain that is never concluded
(its Machine deleted by hand) leaves nothing behind.
"""

from __future__ import annotations

from typing import Any, Final, cast

import redis
from pydantic import BaseModel, Field

from mcm_tasks.redisdb import get_redis, rkey

META_FIELD: Final = "meta"
POD_PREFIX: Final = "pod:"
#: the hash outlives the drain timeout by this much (seconds), so a forced drain still finds it
TTL_MARGIN: Final = 3600.0


class PodProgress(BaseModel):
    """One pod's way out. Times are epoch seconds."""

    uid: str
    #: mounts a claim: drained one at a time, waits for its volumes to detach
    volumes: bool = False
    #: termination grace at selection, bounding the waits after its eviction
    grace: float = 0.0
    #: evictions refused so far (429, or any error for a pod with volumes)
    attempts: int = 0
    next_attempt_at: float = 0.0
    #: when the eviction (or the deletion after too many refusals) was accepted
    removed_at: float | None = None
    #: removed by deletion rather than eviction
    deleted: bool = False
    #: pods with volumes: when its volumes were seen gone from the node
    detached_at: float | None = None
    pv_names: list[str] = Field(default_factory=list)
    volume_ids: list[str] = Field(default_factory=list)
    done: bool = False
    #: why this pod failed the drain ("" while it has not)
    error: str = ""
    #: something worth an Event that does not fail the drain (a reattach that timed out)
    warning: str = ""

    @property
    def resolved(self) -> bool:
        return self.done or bool(self.error)

    @property
    def in_flight(self) -> bool:
        """Evicted, with volumes, and not resolved: the serial lane is busy with it."""
        return self.volumes and self.removed_at is not None and not self.resolved


class DrainProgress(BaseModel):
    machine_uid: str
    node: str
    started_at: float
    #: the reason the drain is forced; a drain that becomes forced starts its records over
    force_reason: str = ""
    #: when the final detach check first found attachments left (see the module docstring)
    barrier_since: float | None = None
    pods: dict[str, PodProgress] = Field(default_factory=dict)

    def fingerprint(self) -> str:
        """Equal fingerprints mean nothing to write."""
        return self.model_dump_json()


def drain_key(machine_key: str) -> str:
    return rkey("drain", machine_key)


class DrainStore:
    """Load, save and forget drain progress; one Redis round trip each, or none when the store knows
    the answer.

    A store remembers the keys it has itself found or left empty (a load of nothing, a clear) until it
    saves them again: loading such a key is None and clearing it is nothing, without a round trip.
    That holds for as long as nobody else writes the key, which is why a store lives for one pass: the
    pass holds its machine's reconcile lock, and the drain progress of a machine is written only by
    the passes of that machine. The deletion flow of a machine with nothing to drain clears the
    progress when it starts, finds none in the drain step and clears it again when the drain and then
    the flow end: one round trip instead of four (``deletion``).
    """

    def __init__(self, client: redis.Redis | None = None) -> None:
        self.redis = client if client is not None else get_redis()
        #: keys this store found or left empty, and has not saved since
        self._empty: set[str] = set()

    def load(self, machine_key: str, machine_uid: str) -> DrainProgress | None:
        """The machine's progress, or None when there is none (or it belongs to an older namesake)."""
        if machine_key in self._empty:
            return None
        raw = cast(dict[str, str], self.redis.hgetall(drain_key(machine_key)))
        if not raw:
            self._empty.add(machine_key)
        meta = raw.get(META_FIELD)
        if not meta:
            return None
        progress = DrainProgress.model_validate_json(meta)
        if progress.machine_uid != machine_uid:
            return None
        progress.pods = {
            field[len(POD_PREFIX) :]: PodProgress.model_validate_json(value)
            for field, value in raw.items()
            if field.startswith(POD_PREFIX)
        }
        return progress

    def save(self, machine_key: str, progress: DrainProgress, ttl: float) -> None:
        """Replace the stored progress with ``progress`` (atomically) and (re)arm its expiry."""
        key = drain_key(machine_key)
        fields: dict[Any, Any] = {META_FIELD: progress.model_copy(update={"pods": {}}).model_dump_json()}
        fields.update({POD_PREFIX + k: p.model_dump_json() for k, p in progress.pods.items()})
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping=fields)
        pipe.expire(key, max(1, int(ttl)))
        self._empty.discard(machine_key)  # before: a save that fails may still have been applied
        pipe.execute()

    def clear(self, machine_key: str) -> None:
        if machine_key in self._empty:
            return
        self.redis.delete(drain_key(machine_key))
        self._empty.add(machine_key)


def state_ttl(drain_timeout: float) -> float:
    return drain_timeout + TTL_MARGIN
