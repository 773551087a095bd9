"""What every long-running command does first: settings from the environment plus MCM-style flags
(``--machine-health-timeout=5m``), with a bad value reported as a usage error naming the flag."""

from __future__ import annotations

from collections.abc import Sequence

import typer

from mcm_tasks.settings import Settings, SettingsError, configure, get_settings, parse_flags


def command_settings(flags: Sequence[str]) -> Settings:
    try:
        return configure(parse_flags(flags)) if flags else get_settings()
    except SettingsError as err:
        raise typer.BadParameter(str(err)) from None
