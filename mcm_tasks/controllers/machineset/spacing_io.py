"""The spacing of a MachineSet's passes (``spacing``) kept in Redis, where every worker finds it: a
pass may run on any worker pod, and a pod SIGKILLed mid-pass leaves no spacing behind (the key is
written after the pass, and expires when it no longer holds anything back)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from contextvars import ContextVar

import redis

from mcm_tasks.controllers.machineset.spacing import held_back, spacing
from mcm_tasks.kinds import Queue
from mcm_tasks.queue import Requeue
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.redisdb import get_redis, rkey
from mcm_tasks.settings import get_settings

log = logging.getLogger(__name__)

#: whether the running pass created or deleted machines (``acted``): such a pass is not spaced
_ACTED: ContextVar[bool] = ContextVar("machineset_pass_acted", default=False)


def acted() -> None:
    """The running pass created or deleted machines. Its successor is not held back: a scale-down
    of 10 000 deletes a batch a pass, and spacing those passes slowed it (527 s against 325 s); what
    grows with the square of the set is the passes that only recount it."""
    _ACTED.set(True)


#: whether the running pass's set belongs to a deployment that rolls (``deployment_rolls``): such a
#: set's recounts are not floored
_ROLLING: ContextVar[bool] = ContextVar("machineset_pass_rolling", default=False)


def deployment_rolls() -> None:
    """The running pass's deployment rolls (``spacing.rolling``): its surge steps wait on this set's
    counts, so the pass raises no recount floor."""
    _ROLLING.set(True)


def _key(key: str) -> str:
    return rkey("machineset", "not-before", key)


def spaced(reconcile: Callable[[str], Requeue | None]) -> Callable[[str], Requeue | None]:
    """``reconcile`` with its passes spaced (``--machine-set-pass-spacing``): a key whose last pass
    asked for room is handed back, requeued for when its room ends, without a read. A pass that
    only recounted also raises the set's floor (``--machine-set-recount-interval``): the wakes its
    machines' changes send wait for it in the delayed set, so they cost no task until then."""

    @functools.wraps(reconcile)
    def run(key: str) -> Requeue | None:
        settings = get_settings()
        factor, recount = settings.machine_set_pass_spacing, settings.machine_set_recount_interval
        if factor <= 0 and recount <= 0:
            return reconcile(key)
        client = get_redis()
        wait = held_back(_read(client, key), time.time()) if factor > 0 else 0.0
        if wait > 0:
            log.debug("MachineSet %s: next pass in %.2fs (spaced by the last one's cost)", key, wait)
            return Requeue(wait, note=f"spaced: {wait:.1f}s after the last pass")
        started = time.thread_time()  # the pass's own CPU: not its waits on a busy host
        token, rolls = _ACTED.set(False), _ROLLING.set(False)
        try:
            return reconcile(key)
        finally:
            did, floored = _ACTED.get(), not _ROLLING.get()
            _ACTED.reset(token)
            _ROLLING.reset(rolls)
            room = (
                0.0
                if did
                else spacing(time.thread_time() - started, factor, settings.machine_updates_batch_period)
            )
            _keep(
                client,
                key,
                room,
                recount if floored and not did else 0.0,
                lift=recount > 0 and (did or not floored),
            )

    return run


def _keep(client: redis.Redis, key: str, room: float, floor: float, *, lift: bool) -> None:
    """After a pass: its spacing (``room``) and the set's floor, in one round trip; ``lift``: a pass
    that acted, or whose deployment rolls, drops the floor, so the changes that follow are counted
    at the batch period."""
    if room <= 0 and floor <= 0 and not lift:
        return
    now = time.time()
    floor_key = queue_keys(Queue.MACHINE_SET).floor + key
    try:
        pipe = client.pipeline(transaction=False)
        if room > 0:
            pipe.set(_key(key), repr(now + room), px=max(1, int(room * 1000)))
        if floor > 0:
            pipe.set(floor_key, repr(now + floor), px=max(1, int(floor * 1000)))
        elif lift:
            pipe.delete(floor_key)
        pipe.execute()
    except redis.RedisError as err:  # the pass is done: only its spacing is lost
        log.warning("MachineSet %s: pass spacing not kept: %s", key, err)


def _read(client: redis.Redis, key: str) -> float | None:
    raw = client.get(_key(key))
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None
