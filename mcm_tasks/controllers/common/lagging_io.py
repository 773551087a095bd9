"""The lag mode's edge (the decision is ``lagging.py``): read whether the mirror lags, and wake the
next controller of a chain from the pass that wrote.

The informer's lag hash is read at most once a second per process (``CACHE_SECONDS``): a pass asks
before each read or write that depends on it, and the hash changes no faster. It is a cache of
Redis, not state: a new process reads it afresh.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from mcm_tasks.controllers.common.lagging import is_lagging
from mcm_tasks.kinds import Queue
from mcm_tasks.probes import INFORMER_LAG_KEY_PARTS
from mcm_tasks.settings import Settings

log = logging.getLogger(__name__)

#: the lag hash is read at most this often per process
CACHE_SECONDS = 1.0

_lock = threading.Lock()
_cached: dict[str, tuple[float, bool]] = {}


def mirror_lagging(settings: Settings) -> bool:
    """Whether the mirror lags now (``lagging.is_lagging``, threshold ``--mirror-lag-threshold``). A
    Redis that does not answer reads as "not lagging": the passes then wait for the informer, as
    they always did."""
    from mcm_tasks.redisdb import get_redis, rkey

    if settings.mirror_lag_threshold <= 0:
        return False
    url, now = settings.redis_url, time.monotonic()
    key = rkey(*INFORMER_LAG_KEY_PARTS)  # a seed mode's namespaces each have their own informer
    with _lock:
        found = _cached.get(url + key)
        if found is not None and now - found[0] < CACHE_SECONDS:
            return found[1]
    try:
        raw = get_redis(url).hgetall(key)
    except Exception:  # the lag mode is a shortcut; without Redis the informer's routing still works
        log.debug("informer lag not read", exc_info=True)
        return False
    values = {_text(k): _text(v) for k, v in raw.items()}  # type: ignore[union-attr]
    answer = is_lagging(values, time.time(), settings.mirror_lag_threshold)
    with _lock:
        _cached[url + key] = (now, answer)
    return answer


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def wake(settings: Settings, items: Iterable[tuple[Queue, str]]) -> None:
    """While the mirror lags, enqueue (queue, key) at once: the pass that wrote an object wakes the
    controller that acts on it next, without waiting for the watch to route the event. Coalesced as
    every enqueue; the informer's late event still wakes them too. A failure is logged, never
    raised: the pass's write is done, and the informer's event wakes the same keys later."""
    wanted = [(str(queue), key) for queue, key in items if key]
    if not wanted or not mirror_lagging(settings):
        return
    from mcm_tasks.queue.producer import enqueue_many

    try:
        enqueue_many(wanted)
    except Exception:
        log.warning("waking %s after a write failed; the informer's event will", wanted, exc_info=True)
