"""``tools/check_pass_scope.py`` (in ``make lint``): nothing under ``mcm_tasks/controllers/`` reads the
process's clients, settings or clock outside the scope builders it lists."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import check_pass_scope  # noqa: E402

PHASE = """
from mcm_tasks.api import now_utc
from mcm_tasks.controllers.common import context_io
from mcm_tasks.settings import get_settings


def build(key):
    return get_settings(), context_io.control_api()


def phase(scope, machine):
    retry = get_settings().short_retry
    api = context_io.target_api()
    stamp = now_utc()
    return retry, api, stamp


def later(clock=None):
    return sorted([], key=now_utc)
"""


def test_the_controllers_read_the_process_only_in_their_scope_builders() -> None:
    assert check_pass_scope.violations() == []


def test_a_phase_that_reads_a_global_is_caught_and_a_listed_builder_is_not(tmp_path: Path) -> None:
    (tmp_path / "machine").mkdir()
    (tmp_path / "machine" / "flow.py").write_text(PHASE)
    found = check_pass_scope.violations(tmp_path, frozenset({("machine/flow.py", "build")}))
    assert found == [
        "machine/flow.py:12: get_settings in phase",
        "machine/flow.py:13: target_api in phase",
        "machine/flow.py:14: now_utc in phase",
        "machine/flow.py:19: now_utc in later",
    ]


def test_a_builder_that_reads_nothing_is_a_stale_entry(tmp_path: Path) -> None:
    (tmp_path / "flow.py").write_text("def build(key):\n    return key\n")
    assert check_pass_scope.violations(tmp_path, frozenset({("flow.py", "build")})) == [
        "flow.py: scope builder build reads nothing"
    ]
