"""One rule for adding and removing a finalizer, for every controller and kind."""

from __future__ import annotations

import pytest

from mcm_tasks.controllers.common.finalizers import with_finalizer


@pytest.mark.parametrize(
    ("before", "present", "after"),
    [
        (None, True, ["f"]),
        ([], True, ["f"]),
        (["a"], True, ["a", "f"]),
        (["f", "a"], True, ["f", "a"]),
        (["a", "f"], False, ["a"]),
        (["f", "a", "f"], False, ["a"]),
        (["a"], False, ["a"]),
        (None, False, []),
    ],
)
def test_with_finalizer(before: list[str] | None, present: bool, after: list[str]) -> None:
    assert with_finalizer(before, "f", present) == after
