"""The closed vocabularies of MCM's API. Models accept other strings too (see ``base.OpenEnum``)."""

from __future__ import annotations

from enum import StrEnum


class MachinePhase(StrEnum):
    """``status.currentStatus.phase``; the empty string means "being created"."""

    PENDING = "Pending"
    AVAILABLE = "Available"
    RUNNING = "Running"
    TERMINATING = "Terminating"
    UNKNOWN = "Unknown"
    FAILED = "Failed"
    CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
    IN_PLACE_UPDATING = "InPlaceUpdating"
    IN_PLACE_UPDATE_SUCCESSFUL = "InPlaceUpdateSuccessful"
    IN_PLACE_UPDATE_FAILED = "InPlaceUpdateFailed"


class MachineState(StrEnum):
    """``status.lastOperation.state``."""

    PROCESSING = "Processing"
    FAILED = "Failed"
    SUCCESSFUL = "Successful"


class MachineOperationType(StrEnum):
    """``status.lastOperation.type``."""

    CREATE = "Create"
    UPDATE = "Update"
    IN_PLACE_UPDATE = "InPlaceUpdate"
    DRAIN_NODE = "DrainNode"
    HEALTH_CHECK = "HealthCheck"
    DELETE = "Delete"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class MachineSetConditionType(StrEnum):
    REPLICA_FAILURE = "ReplicaFailure"
    FROZEN = "Frozen"


class MachineDeploymentConditionType(StrEnum):
    AVAILABLE = "Available"
    PROGRESSING = "Progressing"
    REPLICA_FAILURE = "ReplicaFailure"
    FROZEN = "Frozen"


class MachineDeploymentStrategyType(StrEnum):
    """No default upstream: an empty type fails validation."""

    RECREATE = "Recreate"
    ROLLING_UPDATE = "RollingUpdate"
    IN_PLACE_UPDATE = "InPlaceUpdate"


class OrchestrationType(StrEnum):
    """How an in-place update picks nodes: MCM selects them (Auto) or an operator does (Manual)."""

    AUTO = "Auto"
    MANUAL = "Manual"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"
