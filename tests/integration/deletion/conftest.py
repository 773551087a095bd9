"""The deletion and drain tests' fixtures (support.py): an API server per module, the ``env`` that
runs the deletion flow against it (it replaces the machine tests' ``env`` in this folder) and the
informer mirror."""

from tests.integration.deletion.support import env, mirror, server

__all__ = ["env", "mirror", "server"]
