"""The fixtures the decision tests share, registered once here so that no test module imports
another for them."""

from tests.unit.machine_support import settings

__all__ = ["settings"]
