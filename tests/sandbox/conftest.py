"""The fixtures the API-server emulator's tests share (defined in apiserver_support.py,
client_suite.py and kubelet_support.py), registered once here so that no test module imports them."""

from tests.integration.moto_fixture import aws_world, moto_server
from tests.sandbox.apiserver_support import (
    core_fixture,
    ns_fixture,
    own_server_fixture,
    session_api_fixture,
    widgets_fixture,
)
from tests.sandbox.client_suite import suite_api_fixture
from tests.sandbox.kubelet_support import api, target

__all__ = [
    "api",
    "aws_world",
    "core_fixture",
    "moto_server",
    "ns_fixture",
    "own_server_fixture",
    "session_api_fixture",
    "suite_api_fixture",
    "target",
    "widgets_fixture",
]
