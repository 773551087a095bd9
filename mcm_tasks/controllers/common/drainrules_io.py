"""Drain rules (``MachineDrainRule``) from the API servers, for the drain (``machine/drain/rules``) and
the ``drain-rules`` safety job: the ``MachineDrainRule`` objects of the control namespace, the
target cluster's Namespace labels, and each rule's ``Valid`` condition and Event.

The rules are read when a drain needs them, not mirrored: they matter only while a node drains, are
few, and a LIST of one namespace's rules is answered from one small collection. Each worker process
keeps the last answer for ``min(5 s, short_retry)``, so a thousand drains in one round cost a LIST per
process, not one each, while a rule written is in force within seconds (every pod's removal is a
later round's decision). An install without our CRD (a Go MCM's operator swapping in) or without the
right to read it has no rules: MCM's drain, unchanged (said once in the log).

``validate_rules`` (the ``drain-rules`` job on the safety queue, and the overshooting check once per
its period) writes each rule's ``Valid`` condition when it changes: ``False`` with the problems,
and then a Warning Event ``InvalidDrainRule``, or ``True``. A drain does not write it (a thousand
drains would race to), it only leaves the invalid rules out, as the condition says.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Final

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.api.drainrule import MachineDrainRule, RuleCondition
from mcm_tasks.api.meta import set_condition
from mcm_tasks.cache.models import Unreadable, parse_object
from mcm_tasks.controllers.common import drainrules, events
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe, is_conflict, is_forbidden, is_not_found
from mcm_tasks.kube.events import WARNING, ObjectRef
from mcm_tasks.settings import Settings

log = logging.getLogger(__name__)

VALID: Final = "Valid"
INVALID_REASON: Final = "InvalidDrainRule"
VALID_REASON: Final = "Valid"
#: the longest a process keeps a namespace's rules
RULES_TTL: Final = 5.0

_cache: dict[str, tuple[float, list[dict[str, Any]]]] = {}
_unavailable_told: set[str] = set()


def _ttl(settings: Settings) -> float:
    return min(RULES_TTL, settings.short_retry)


def raw_rules(scope: PassScope[Any], namespace: str) -> list[dict[str, Any]]:
    """The namespace's rules as the API server sends them (recently listed, or listed now)."""
    cached = _cache.get(namespace)
    if cached is not None and time.monotonic() - cached[0] < _ttl(scope.settings):
        return cached[1]
    try:
        items = ops.list_(scope.api, kinds.MACHINE_DRAIN_RULE.resource, namespace)["items"]
    except ApiException as err:
        if not (is_not_found(err) or is_forbidden(err)):
            raise
        if namespace not in _unavailable_told:
            _unavailable_told.add(namespace)
            log.warning(
                "MachineDrainRules of %s cannot be read (%s): drains use none", namespace, describe(err)
            )
        items = []
    _cache[namespace] = (time.monotonic(), list(items))
    return list(items)


def parsed(raw: Sequence[dict[str, Any]]) -> tuple[list[MachineDrainRule], list[tuple[dict[str, Any], str]]]:
    """(the rules that parse, (raw rule, why not) for those that do not)."""
    out: list[MachineDrainRule] = []
    bad: list[tuple[dict[str, Any], str]] = []
    for item in raw:
        try:
            out.append(parse_object(MachineDrainRule, item))
        except Unreadable as err:
            bad.append((item, str(err)[:300]))
    return out, bad


def drain_rules(scope: PassScope[Any], namespace: str) -> list[MachineDrainRule]:
    """The readable rules of the namespace (the valid ones are sorted out by ``rules``)."""
    return parsed(raw_rules(scope, namespace))[0]


def namespace_labels(api: ApiClient) -> dict[str, dict[str, str]]:
    """Each target Namespace's labels, by name (read only when a rule selects by them)."""
    items = ops.list_(api, kinds.NAMESPACE.resource)["items"]
    return {str(n["metadata"]["name"]): dict(n["metadata"].get("labels") or {}) for n in items}


# --- validation ----------------------------------------------------------------------------------------


def _ref(raw: dict[str, Any]) -> ObjectRef:
    meta = raw.get("metadata") or {}
    return ObjectRef(
        api_version=kinds.MACHINE_DRAIN_RULE.resource.api_version,
        kind=kinds.MACHINE_DRAIN_RULE.resource.kind,
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        uid=str(meta.get("uid") or ""),
    )


def _conditions(raw: dict[str, Any]) -> list[RuleCondition]:
    out = []
    for c in (raw.get("status") or {}).get("conditions") or []:
        try:
            out.append(RuleCondition.model_validate(c))
        except ValueError:
            continue
    return out


def _judge(scope: PassScope[Any], raw: dict[str, Any], problems: list[str]) -> None:
    """Write the rule's ``Valid`` condition when it changes; a newly invalid rule gets an Event."""
    meta = raw.get("metadata") or {}
    generation = meta.get("generation")
    message = drainrules.summary(problems) if problems else "the rule is used by drains"
    new = RuleCondition(
        type=VALID,
        status="False" if problems else "True",
        reason=INVALID_REASON if problems else VALID_REASON,
        message=message,
        last_transition_time=scope.clock(),
        observed_generation=generation if isinstance(generation, int) else None,
    )
    current = _conditions(raw)
    old = next((c for c in current if c.type == VALID), None)
    if old is not None and (old.status, old.message, old.observed_generation) == (
        new.status,
        new.message,
        new.observed_generation,
    ):
        return
    conditions = set_condition(current, new)
    if old is not None and old.status == new.status:  # the message or generation moved on
        conditions = [new.model_copy(update={"last_transition_time": old.last_transition_time})
                      if c.type == VALID else c for c in conditions]  # fmt: skip
    body = {**raw, "status": {**(raw.get("status") or {}),
                              "conditions": [c.model_dump(mode="json", by_alias=True, exclude_none=True)
                                             for c in conditions]}}  # fmt: skip
    try:
        ops.update_status(scope.api, kinds.MACHINE_DRAIN_RULE.resource, body)
    except ApiException as err:
        if is_not_found(err) or is_conflict(err):  # gone, or changed: the next look judges it again
            return
        raise
    if problems:
        log.warning(
            "MachineDrainRule %s/%s is invalid and ignored: %s",
            meta.get("namespace"),
            meta.get("name"),
            message,
        )
        events.recorder(scope.api, events.MACHINE_COMPONENT).event(
            _ref(raw), WARNING, INVALID_REASON, f"{message}; the rule is ignored"
        )


def validate_rules(scope: PassScope[Any], namespace: str) -> int:
    """Judge every rule of the namespace, listed now; the number found invalid."""
    _cache.pop(namespace, None)
    items = raw_rules(scope, namespace)
    good, bad = parsed(items)
    invalid = 0
    for item, why in bad:
        invalid += 1
        _judge(scope, item, [f"the rule cannot be read: {why}"])
    by_name = {str((i.get("metadata") or {}).get("name")): i for i in items}
    for rule in good:
        found = drainrules.problems(rule)
        invalid += bool(found)
        _judge(scope, by_name[rule.metadata.name or ""], found)
    return invalid
