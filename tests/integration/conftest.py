"""The fixtures the integration tests of this folder share, registered once here so that no test
module imports another (or a fixture) for them. Each is defined beside its helpers in a
``*_support.py`` module; the deletion tests have their own ``env`` in ``deletion/conftest.py``."""

from tests.integration.informer_support import client
from tests.integration.machine_support import env, every_request_runs
from tests.integration.machinedeployment_support import world
from tests.integration.machineset_support import crds, harness
from tests.integration.moto_fixture import aws_world, moto_server

__all__ = ["aws_world", "client", "crds", "env", "every_request_runs", "harness", "moto_server", "world"]
