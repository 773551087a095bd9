"""Fault injection at the HTTP edge: the admin endpoint and applying ``FaultSet`` rules to requests.

The admin endpoint is never subject to faults itself, so a test can always switch them off.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from pydantic import ValidationError

from mcm_sandbox.apiserver import errors
from mcm_sandbox.apiserver.store import dumps, loads
from mcm_sandbox.apiserver.watch import Watcher
from mcm_sandbox.faults import FaultRule, FaultSet

_REASONS = {
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
    409: "Conflict",
    404: "NotFound",
}
HANG_POLL_SECONDS = 0.05


class DropConnection(Exception):
    """The request is lost: the connection closes without an answer (a hung or cut request)."""


class FaultGate:
    def __init__(self, watchers: set[Watcher]) -> None:
        self.faults = FaultSet()
        self.watchers = watchers

    async def admin(self, request: web.Request) -> web.Response:
        parts = [p for p in request.path.split("/") if p]
        if request.method == "GET":
            rules = [r.model_dump(mode="json") for r in self.faults.active()]
            return web.Response(body=dumps({"items": rules}), content_type="application/json")
        if request.method == "DELETE":
            if len(parts) > 2:
                if not self.faults.remove(parts[2]):
                    raise errors.not_found("faults", "sandbox", parts[2])
            else:
                self.faults.clear()
            return web.Response(body=dumps({"status": "Success"}), content_type="application/json")
        if request.method == "POST":
            try:
                rule = FaultRule.model_validate(loads(await request.read()))
            except (ValueError, ValidationError) as exc:
                raise errors.bad_request(f"invalid fault rule: {exc}") from exc
            rule_id = self.faults.add(rule)
            if rule.action == "cut-watches":
                self.cut_watches()
            return web.Response(body=dumps({"id": rule_id}), status=201, content_type="application/json")
        raise errors.method_not_allowed()

    def cut_watches(self) -> None:
        for watcher in list(self.watchers):
            if self.faults.cuts_watches(watcher.resource):
                watcher.cut_now()

    async def gate(self, verb: str, resource: str) -> None:
        """Apply the first matching rule: fail, delay, or hang until the rule ends (then drop)."""
        rule = self.faults.match(verb, resource)
        if rule is None:
            return
        if rule.action == "latency":
            await asyncio.sleep(rule.latency_ms / 1000)
        elif rule.action == "error":
            headers = {"Retry-After": "1"} if rule.status_code in (429, 503) else None
            raise errors.ApiError(
                rule.status_code, _REASONS.get(rule.status_code, "InternalError"), rule.message, {}, headers
            )
        elif rule.action == "hang":
            while any(r.id == rule.id for r in self.faults.active()):
                await asyncio.sleep(HANG_POLL_SECONDS)
            raise DropConnection()
        else:  # cut-watches: a new watch is cut as soon as it opens
            raise DropConnection()
