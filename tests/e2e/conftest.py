"""The fixtures the end-to-end tests share, registered once here so that no test module imports
them."""

from tests.integration.moto_fixture import aws_world, moto_server

__all__ = ["aws_world", "moto_server"]
