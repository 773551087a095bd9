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


DECIDES = """
import redis
from mcm_tasks.kube import ops
from mcm_tasks.controllers.common import status_io
from mcm_tasks.controllers.common.status_io import update_machine_status
from mcm_tasks.controllers.machine.drain.state_io import DrainProgress
from mcm_tasks.kube.errors import is_conflict
"""


def test_every_module_that_decides_imports_nothing_that_acts() -> None:
    assert check_pass_scope.naming_violations() == []


def test_a_module_that_decides_yet_imports_what_acts_is_caught(tmp_path: Path) -> None:
    (tmp_path / "machine").mkdir()
    for name in ("plan.py", "plan_io.py", "reconcile.py", "classes.py"):
        (tmp_path / "machine" / name).write_text(DECIDES)
    assert check_pass_scope.naming_violations(tmp_path) == [
        "machine/plan.py:2: decides but imports redis (name it *_io.py)",
        "machine/plan.py:3: decides but imports mcm_tasks.kube.ops (name it *_io.py)",
        "machine/plan.py:4: decides but imports mcm_tasks.controllers.common.status_io (name it *_io.py)",
        "machine/plan.py:5: decides but imports mcm_tasks.controllers.common.status_io.update_machine_status "
        "(name it *_io.py)",
    ]


WALL_CLOCK = """
import datetime as dt
from datetime import UTC, datetime


def step(scope):
    started = datetime.now(UTC)
    return started, dt.datetime.utcnow(), scope.precise_clock()
"""


def test_a_phase_that_reads_the_wall_clock_is_caught(tmp_path: Path) -> None:
    (tmp_path / "drain_io.py").write_text(WALL_CLOCK)
    assert check_pass_scope.violations(tmp_path, frozenset()) == [
        "drain_io.py:7: datetime.now in step",
        "drain_io.py:8: datetime.utcnow in step",
    ]
