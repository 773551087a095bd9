"""The AWS provider (``MachineClass.provider: AWS``) on boto3; see ``driver`` for the flow."""

from providers.aws.driver import AWSDriver

__all__ = ["AWSDriver"]
