"""The seed demo's live view: machines by phase per shoot namespace and each shoot's Nodes."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from mcm_sandbox.seed_demo import seed_table, shoot_names


class FakeFleet:
    def __init__(self, phases: list[str], desired: int, nodes: int) -> None:
        self.phases, self.desired, self.node_count = phases, desired, nodes

    def machines(self) -> list[dict[str, Any]]:
        return [{"status": {"currentStatus": {"phase": p}}} for p in self.phases]

    def machine_sets(self) -> list[dict[str, Any]]:
        return [{"spec": {"replicas": self.desired}}]

    def nodes(self) -> list[object]:
        return [object()] * self.node_count


def rendered(table: Any) -> str:
    console = Console(width=160, record=True)
    console.print(table)
    return console.export_text()


def test_the_view_has_a_row_per_shoot_with_its_phases_and_nodes() -> None:
    fleets = {
        "shoot-1": FakeFleet(["Running", "Running", "Pending"], 3, 2),
        "shoot-2": FakeFleet(["Running"], 1, 1),
    }
    text = rendered(seed_table("5s", fleets))  # type: ignore[arg-type]
    rows = [
        [cell.strip() for cell in line.strip("│ ").split("│")] for line in text.splitlines() if "│" in line
    ]
    assert rows == [["shoot-1", "3", "1", "2", "2"], ["shoot-2", "1", "", "1", "1"]]
    header = next(line for line in text.splitlines() if "namespace" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == [
        "namespace",
        "desired",
        "Pending",
        "Running",
        "nodes",
    ]
    assert "4 machines, 2 shoots" in text


def test_shoots_are_named_as_the_sandbox_names_them() -> None:
    assert shoot_names(3) == ["shoot-1", "shoot-2", "shoot-3"]
