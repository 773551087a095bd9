"""A redis-py connection that counts the commands it sends: the cost tests count Redis round trips
per task against a real Redis with it."""

from __future__ import annotations

import redis


class CountingConnection(redis.Connection):
    """Counts what a client sends: round trips (one send per command, or per pipeline) and commands."""

    sent = 0
    commands = 0

    def send_packed_command(self, command: object, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)  # type: ignore[arg-type]

    def send_command(self, *args: object, **kwargs: object) -> None:
        CountingConnection.commands += 1
        super().send_command(*args, **kwargs)

    def pack_commands(self, commands: list[tuple[object, ...]]) -> list[bytes]:
        CountingConnection.commands += len(commands)
        return super().pack_commands(commands)  # type: ignore[no-any-return]
