"""Label and field selectors with the grammar and semantics of k8s.io/apimachinery.

Informers list and watch with ``labelSelector``/``fieldSelector``; PDBs and owners select pods with
``metav1.LabelSelector`` dicts. Both must match exactly what a real server would return, because
a controller that sees a different set of objects makes different decisions.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


class SelectorError(ValueError):
    """A selector the API server would refuse with 400 BadRequest."""


_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_RE = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

_SET_OPS = ("in", "notin")
_VALUE_OPS = ("=", "==", "!=")
_NUMERIC_OPS = ("gt", "lt")


def _check_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    problems = []
    if "/" in key and (not prefix or len(prefix) > 253 or not _SUBDOMAIN_RE.match(prefix)):
        problems.append("prefix part must be a lowercase RFC 1123 subdomain")
    if not name or len(name) > 63 or not _NAME_RE.match(name):
        problems.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
            "end with an alphanumeric character"
        )
    if problems:
        raise SelectorError(
            f"unable to parse requirement: key: Invalid value: {key!r}: {'; '.join(problems)}"
        )


def _check_value(value: str) -> None:
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise SelectorError(
            f"unable to parse requirement: values[0][{value}]: Invalid value: {value!r}: a valid label "
            "must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character"
        )


@dataclass(frozen=True)
class Requirement:
    """One term; ``operator`` is one of exists, !, =, ==, !=, in, notin, gt, lt."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("=", "==", "in"):
            return present and labels[self.key] in self.values
        if self.operator in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        try:
            actual, bound = int(labels[self.key]), int(self.values[0])
        except ValueError:
            return False
        return actual > bound if self.operator == "gt" else actual < bound

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!":
            return f"!{self.key}"
        if self.operator in _SET_OPS:
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        symbol = {"gt": ">", "lt": "<"}.get(self.operator, self.operator)
        return f"{self.key}{symbol}{self.values[0]}"


@dataclass(frozen=True)
class LabelSelector:
    """All requirements must match. ``nothing`` is the selector of a nil ``metav1.LabelSelector``."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """True when it selects everything."""
        return not self.requirements and not self.nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        found = labels or {}
        return all(req.matches(found) for req in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(req) for req in self.requirements)


EVERYTHING = LabelSelector()
NOTHING = LabelSelector(nothing=True)

# --------------------------------------------------------------------------- label selector parser

_SPECIAL = "!=(),<>"


def _tokens(text: str) -> Iterator[str]:
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith(("!=", "=="), i):
            yield text[i : i + 2]
            i += 2
        elif ch in _SPECIAL:
            yield ch
            i += 1
        else:
            start = i
            while i < len(text) and not text[i].isspace() and text[i] not in _SPECIAL:
                i += 1
            yield text[start:i]


def _is_identifier(token: str | None) -> bool:
    return token is not None and token != "" and token[0] not in _SPECIAL


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = list(_tokens(text))
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        self.pos += 1
        return token

    def fail(self, found: str | None, expected: str) -> SelectorError:
        return SelectorError(
            f"unable to parse requirement: found '{found or ''}', expected: {expected} in {self.text!r}"
        )

    def parse(self) -> LabelSelector:
        requirements: list[Requirement] = []
        if self.peek() is None:
            return EVERYTHING
        while True:
            requirements.append(self.requirement())
            token = self.take()
            if token is None:
                return LabelSelector(tuple(requirements))
            if token != ",":
                raise self.fail(token, "',' or end of string")

    def requirement(self) -> Requirement:
        token = self.take()
        if token == "!":
            key = self.take()
            if not _is_identifier(key) or key in _SET_OPS:
                raise self.fail(key, "identifier")
            assert key is not None
            _check_key(key)
            return Requirement(key, "!")
        if not _is_identifier(token) or token in _SET_OPS:
            raise self.fail(token, "identifier or '!'")
        assert token is not None
        _check_key(token)
        if self.peek() in (None, ","):
            return Requirement(token, "exists")
        operator = self.take()
        if operator in _SET_OPS:
            return Requirement(token, operator, self.value_set())
        if operator in _VALUE_OPS or operator in ("<", ">"):
            value = "" if self.peek() in (None, ",") else self.take()
            if value is None or (value and not _is_identifier(value)):
                raise self.fail(value, "a value")
            if operator in ("<", ">"):
                return _numeric(token, "gt" if operator == ">" else "lt", value)
            _check_value(value)
            return Requirement(token, operator, (value,))
        raise self.fail(operator, "=, ==, !=, in, notin, <, >")

    def value_set(self) -> tuple[str, ...]:
        opening = self.take()
        if opening != "(":
            raise self.fail(opening, "'('")
        values: list[str] = []
        expecting_value = True
        while True:
            token = self.take()
            if token is None:
                raise self.fail(None, "')'")
            if token == ")":
                if expecting_value and values:
                    values.append("")
                break
            if token == ",":
                if expecting_value:
                    values.append("")
                expecting_value = True
            elif _is_identifier(token) and expecting_value:
                _check_value(token)
                values.append(token)
                expecting_value = False
            else:
                raise self.fail(token, "',' or ')'")
        if not values:
            raise SelectorError(
                "unable to parse requirement: for 'in', 'notin' operators, values set can't be empty"
            )
        return tuple(dict.fromkeys(values))


def _numeric(key: str, operator: str, value: str) -> Requirement:
    try:
        int(value)
    except ValueError:
        raise SelectorError(
            f"unable to parse requirement: values[0]: Invalid value: {value!r}: for 'Gt', 'Lt' operators, "
            "the value must be an integer"
        ) from None
    return Requirement(key, operator, (value,))


def parse_label_selector(text: str) -> LabelSelector:
    """Parse the ``labelSelector`` query parameter; an empty string selects everything."""
    return _Parser(text or "").parse()


_API_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def label_selector_from_api(
    sel: Mapping[str, Any] | None, *, nil_matches_everything: bool = False
) -> LabelSelector:
    """Convert a ``metav1.LabelSelector`` dict as ``metav1.LabelSelectorAsSelector`` does.

    A nil selector selects nothing (the rule for PDBs and most controllers) unless
    ``nil_matches_everything``; an empty ``{}`` selects everything.
    """
    if sel is None:
        return EVERYTHING if nil_matches_everything else NOTHING
    requirements: list[Requirement] = []
    for key, value in (sel.get("matchLabels") or {}).items():
        _check_key(key)
        _check_value(str(value))
        requirements.append(Requirement(key, "=", (str(value),)))
    for expr in sel.get("matchExpressions") or []:
        key, op = expr.get("key", ""), expr.get("operator", "")
        values = tuple(str(v) for v in expr.get("values") or [])
        if op not in _API_OPERATORS:
            raise SelectorError(f"{op!r} is not a valid label selector operator")
        _check_key(key)
        if op in ("In", "NotIn") and not values:
            raise SelectorError(
                "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
            )
        if op in ("Exists", "DoesNotExist") and values:
            raise SelectorError(
                "values: Invalid value: values set must be empty for exists and does not exist"
            )
        for value in values:
            _check_value(value)
        requirements.append(Requirement(key, _API_OPERATORS[op], values))
    return LabelSelector(tuple(requirements))


# --------------------------------------------------------------------------- field selectors


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    operator: str  # "=" or "!="
    value: str


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = field(default_factory=tuple)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def exact(self, name: str) -> str | None:
        """The value the selector requires ``name`` to equal, if any (lets a store index by it)."""
        for req in self.requirements:
            if req.field == name and req.operator == "=":
                return req.value
        return None

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for req in self.requirements:
            equal = field_value(obj, req.field) == req.value
            if equal != (req.operator == "="):
                return False
        return True


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string a field selector compares with: missing fields are "", booleans lowercase."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], [], False
    for ch in text:
        if escaped:
            current.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence in {value!r}")
            out.append(value[i + 1])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def parse_field_selector(text: str, allowed: Collection[str]) -> FieldSelector:
    """Parse ``fieldSelector``; fields outside ``allowed`` fail as kube's conversion funcs do."""
    requirements: list[FieldRequirement] = []
    for term in _split_unescaped(text or "", ","):
        if not term:
            continue
        found = _split_term(term)
        if found is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        name, op, value = found
        if name not in allowed:
            raise SelectorError(f"field label not supported: {name}")
        requirements.append(FieldRequirement(name, "!=" if op == "!=" else "=", _unescape(value)))
    return FieldSelector(tuple(requirements))


def _split_term(term: str) -> tuple[str, str, str] | None:
    """Split at the first unescaped operator, trying != before == before = at each position."""
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i].strip(), op, term[i + len(op) :]
        i += 1
    return None
