"""The parsed-object cache: an object is parsed again only when its stored bytes change, vanished
objects are dropped, and derived values live exactly as long as the cached object they came from."""

from __future__ import annotations

from typing import Any

import orjson

from mcm_sandbox.testing import fixtures as fx
from mcm_tasks import kinds
from mcm_tasks.api import Machine
from mcm_tasks.cache import layout, models
from mcm_tasks.cache.models import ParsedCache


class CountingParse:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, obj: Any) -> Machine:
        self.calls += 1
        return Machine.model_validate(obj)


def stored(name: str, generation: int = 1) -> tuple[str, bytes]:
    obj = fx.machine(name)
    obj["metadata"]["generation"] = generation
    return layout.object_key(obj["metadata"]["namespace"], name), orjson.dumps(obj)


def test_unchanged_bytes_give_the_same_object_changed_bytes_a_new_parse() -> None:
    cache, parse = ParsedCache(), CountingParse()
    key, raw = stored("a")
    first = cache.one(kinds.MACHINE.mirror, parse, key, raw)
    assert cache.one(kinds.MACHINE.mirror, parse, key, bytes(raw)) is first
    assert parse.calls == 1
    _, changed = stored("a", generation=2)
    second = cache.one(kinds.MACHINE.mirror, parse, key, changed)
    assert second is not first and second.metadata.generation == 2
    assert parse.calls == 2


def test_a_full_list_drops_objects_no_longer_stored() -> None:
    cache, parse = ParsedCache(), CountingParse()
    a, b = stored("a"), stored("b")
    assert len(cache.every(kinds.MACHINE.mirror, parse, dict([a, b]))) == 2
    assert [m.metadata.name for m in cache.every(kinds.MACHINE.mirror, parse, dict([b]))] == ["b"]
    assert cache.size(kinds.MACHINE.mirror, parse) == 1
    assert parse.calls == 2


def test_partial_reads_drop_objects_not_read_for_a_sweep_period(monkeypatch: Any) -> None:
    """Reads by index or by keys (``some``) cannot tell a deleted object from one not asked for: what
    a sweep period did not read goes, so a worker does not keep every node it ever read."""
    monkeypatch.setattr(models, "SWEEP_EVERY", 4)
    cache, parse = ParsedCache(), CountingParse()
    a, b = stored("a"), stored("b")
    cache.some(kinds.MACHINE.mirror, parse, [a, b])  # 2 reads
    cache.some(kinds.MACHINE.mirror, parse, [b, b])  # 4: a sweep; both read since the last one
    assert cache.size(kinds.MACHINE.mirror, parse) == 2
    cache.some(kinds.MACHINE.mirror, parse, [b, b, b, b])  # 4 more: a was not read, b was
    assert cache.size(kinds.MACHINE.mirror, parse) == 1
    assert parse.calls == 2


def test_parsers_do_not_share_entries() -> None:
    cache, models, dicts = ParsedCache(), CountingParse(), CountingParse()
    key, raw = stored("a")
    cache.one(kinds.MACHINE.mirror, models, key, raw)
    cache.one(kinds.MACHINE.mirror, dicts, key, raw)
    assert (models.calls, dicts.calls) == (1, 1)


def test_derived_values_are_remembered_only_for_the_cached_version() -> None:
    cache, parse = ParsedCache(), CountingParse()
    computed: list[str] = []

    def name_of(m: Machine) -> str:
        computed.append(m.metadata.name or "")
        return m.metadata.name or ""

    key, raw = stored("a")
    cached = cache.one(kinds.MACHINE.mirror, parse, key, raw)
    assert cache.derived(cached, "name", name_of) == "a"
    assert cache.derived(cached, "name", name_of) == "a"
    assert computed == ["a"]
    # an object that did not come from the cache (a fresh parse, say) is computed every time
    fresh = Machine.model_validate(orjson.loads(raw))
    cache.derived(fresh, "name", name_of)
    cache.derived(fresh, "name", name_of)
    assert computed == ["a", "a", "a"]
    # a new version is a new object: computed again for it
    _, changed = stored("a", generation=2)
    newer = cache.one(kinds.MACHINE.mirror, parse, key, changed)
    cache.derived(newer, "name", name_of)
    assert computed == ["a", "a", "a", "a"]


def test_a_spec_scoped_value_is_kept_while_the_spec_version_is_the_same() -> None:
    """A status write or a label makes a new version with the same generation: a value of the spec
    alone (``SPEC_SCOPED``) is not computed again for it; a value of the whole object is, and so is
    the spec's after a spec change (a new generation) or for another object of the same name."""
    cache, parse = ParsedCache(), CountingParse()
    computed: list[str] = []

    def spec_of(m: Machine) -> str:
        computed.append("spec")
        return m.spec.class_.name

    def phase_of(m: Machine) -> str:
        computed.append("phase")
        return m.status.current_status.phase

    def version(phase: str, generation: int = 1, uid: str = "uid-a") -> tuple[str, Any]:
        obj = fx.machine("a", phase=phase)
        obj["metadata"].update(generation=generation, uid=uid)
        key = layout.object_key(obj["metadata"]["namespace"], "a")
        return key, cache.one(kinds.MACHINE.mirror, parse, key, orjson.dumps(obj))

    def both(m: Machine) -> tuple[str, str]:
        return cache.derived(m, models.SPEC_SCOPED + "class", spec_of), cache.derived(m, "phase", phase_of)

    _, first = version("Pending")
    assert both(first) == ("cls", "Pending") and computed == ["spec", "phase"]
    _, running = version("Running")  # its status written: same generation
    assert both(running) == ("cls", "Running") and computed == ["spec", "phase", "phase"]
    _, respecced = version("Running", generation=2)
    both(respecced)
    assert computed == ["spec", "phase", "phase", "spec", "phase"]
    _, recreated = version("Running", generation=2, uid="uid-other")
    both(recreated)
    assert computed == ["spec", "phase", "phase", "spec", "phase", "spec", "phase"]
