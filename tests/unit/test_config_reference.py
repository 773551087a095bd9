"""The configuration reference (docs/reference/configuration.md) is generated from the settings and
stays current: every setting is on it with its environment variable, default, upstream equivalent
and status, and every upstream flag we accept and ignore is listed as such."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from mcm_tasks.settings import UPSTREAM_IGNORED_FLAGS, VERBOSITY_FLAG, Settings

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "configuration.md"
sys.path.insert(0, str(ROOT / "tools"))

import config_reference  # noqa: E402


def _rows() -> dict[str, list[str]]:
    """The settings table's rows by flag: [flag, environment, default, upstream, status, meaning]."""
    rows = {}
    for line in PAGE.read_text().split("## Upstream flags")[0].splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 6 and cells[0].startswith("`--"):
            rows[cells[0].strip("`")] = cells
    return rows


def test_the_page_is_what_the_generator_writes() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "config_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_every_setting_has_a_row_with_env_default_upstream_and_status() -> None:
    rows = _rows()
    for name in Settings.model_fields:
        flag = "--" + name.replace("_", "-")
        assert flag in rows, f"{flag} is missing from the configuration reference"
        _, env, default, upstream, status, meaning = rows[flag]
        assert env == f"`MCM_{name.upper()}`"
        assert default.startswith("`") and upstream and meaning
        assert status in {"implemented", "upstream constant", "ours"} or status.startswith("differently: ")
    assert len(rows) == len(Settings.model_fields)


def test_the_upstream_tables_name_only_settings() -> None:
    flags = {name.replace("_", "-") for name in Settings.model_fields}
    for table in (config_reference.UPSTREAM_FLAGS, config_reference.UPSTREAM_CONSTANTS):
        assert set(table) <= flags, set(table) - flags
    assert set(config_reference.DIFFERENTLY) <= set(config_reference.UPSTREAM_FLAGS)


def test_an_upstream_command_line_flag_is_implemented_or_listed_as_ignored() -> None:
    from tests.upstream_flags import upstream_command_line

    given = {arg.split("=")[0].lstrip("-") for arg in upstream_command_line(Path("/c"), Path("/t"))}
    # --v is read apart from the settings (settings.take_verbosity): it picks the log level
    assert given <= set(config_reference.UPSTREAM_FLAGS) | set(UPSTREAM_IGNORED_FLAGS) | {VERBOSITY_FLAG}
    text = PAGE.read_text()
    for flag in UPSTREAM_IGNORED_FLAGS:
        assert f"| `--{flag}` |" in text and "accepted and ignored" in text
