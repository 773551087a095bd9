"""The ``local`` provider: a cloud kept in Redis for the sandbox, tests and demos (see driver.py)."""

from providers.local.cloud import LocalCloud, LocalVM, VMState
from providers.local.driver import LocalDriver
from providers.local.spec import CSI_DRIVER, LocalProviderSpec

__all__ = ["CSI_DRIVER", "LocalCloud", "LocalDriver", "LocalProviderSpec", "LocalVM", "VMState"]
