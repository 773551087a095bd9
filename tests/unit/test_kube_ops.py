"""Resource paths, delete options, model conversion and retry-on-conflict, without a server."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field

from mcm_tasks import kinds
from mcm_tasks.kube import ops


def status_error(code: int, reason: str) -> ApiException:
    err = ApiException(status=code, reason=reason)
    err.body = json.dumps({"kind": "Status", "apiVersion": "v1", "reason": reason, "code": code})
    return err


def test_paths_for_core_group_and_custom_resources() -> None:
    assert (
        kinds.MACHINE.resource.path("shoot--a")
        == "/apis/machine.sapcloud.io/v1alpha1/namespaces/shoot--a/machines"
    )
    assert (
        kinds.MACHINE_SET.resource.path("ns", "set-1", "status")
        == "/apis/machine.sapcloud.io/v1alpha1/namespaces/ns/machinesets/set-1/status"
    )
    assert kinds.MACHINE.resource.path(None) == "/apis/machine.sapcloud.io/v1alpha1/machines"
    assert kinds.POD.resource.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    # cluster-scoped: a namespace given by mistake does not leak into the path
    assert kinds.NODE.resource.path("ns", "node-1") == "/api/v1/nodes/node-1"
    assert (
        kinds.POD_DISRUPTION_BUDGET.resource.path("ns")
        == "/apis/policy/v1/namespaces/ns/poddisruptionbudgets"
    )
    with pytest.raises(ValueError):
        kinds.MACHINE.resource.path("ns", None, "status")


def test_mcm_kinds_in_one_table() -> None:
    assert {r.plural for r in kinds.MCM_RESOURCES} == {
        "machines", "machinesets", "machinedeployments", "machineclasses",
    }  # fmt: skip
    assert {r.api_version for r in kinds.MCM_RESOURCES} == {"machine.sapcloud.io/v1alpha1"}
    assert kinds.resource_for_kind("MachineDeployment").plural == "machinedeployments"
    assert kinds.resource_for_kind("Node") is kinds.NODE.resource
    with pytest.raises(KeyError):
        kinds.resource_for_kind("Gizmo")


def test_delete_options_carry_preconditions_and_propagation() -> None:
    assert ops.delete_options() == {"apiVersion": "v1", "kind": "DeleteOptions"}
    opts = ops.delete_options(
        uid="u-1",
        resource_version="42",
        propagation_policy=ops.Propagation.FOREGROUND,
        grace_period_seconds=0,
    )
    assert opts["preconditions"] == {"uid": "u-1", "resourceVersion": "42"}
    assert opts["propagationPolicy"] == "Foreground"
    assert opts["gracePeriodSeconds"] == 0


class _Meta(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    name: str
    resource_version: str | None = Field(default=None, alias="resourceVersion")


class _Thing(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    api_version: str = Field(default="machine.sapcloud.io/v1alpha1", alias="apiVersion")
    kind: str = "Machine"
    metadata: _Meta


def test_models_convert_through_their_api_form() -> None:
    thing = _Thing(metadata=_Meta(name="m-1"))
    as_dict = ops.to_dict(thing)
    assert as_dict == {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": "m-1"},
    }
    back = ops.from_dict(_Thing, {**as_dict, "metadata": {"name": "m-1", "resourceVersion": "7"}})
    assert back.metadata.resource_version == "7"


class _Flaky:
    """A read-modify-write stand-in that conflicts a given number of times."""

    def __init__(self, conflicts: int, error: ApiException | None = None) -> None:
        self.conflicts = conflicts
        self.error = error or status_error(409, "Conflict")
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.conflicts:
            raise self.error
        return "written"


def test_retry_on_conflict_retries_until_success() -> None:
    slept: list[float] = []
    fn = _Flaky(conflicts=3)
    assert ops.retry_on_conflict(fn, attempts=5, backoff=0.25, sleep=slept.append) == "written"
    assert fn.calls == 4
    assert slept == [0.25, 0.25, 0.25]


def test_retry_on_conflict_gives_up_with_the_last_conflict() -> None:
    fn = _Flaky(conflicts=10)
    with pytest.raises(ApiException) as info:
        ops.retry_on_conflict(fn, attempts=3, sleep=lambda _s: None)
    assert info.value.status == 409
    assert fn.calls == 3


@pytest.mark.parametrize("error", [status_error(409, "AlreadyExists"), status_error(404, "NotFound")])
def test_other_errors_are_not_retried(error: ApiException) -> None:
    fn = _Flaky(conflicts=1, error=error)
    with pytest.raises(ApiException):
        ops.retry_on_conflict(fn, attempts=5, sleep=lambda _s: None)
    assert fn.calls == 1


def test_backoff_grows_by_factor_up_to_cap_with_jitter() -> None:
    step = ops.Backoff(duration=0.01, factor=5.0, jitter=0.0, cap=0.3).delays()
    assert [round(step(), 6) for _ in range(4)] == [0.01, 0.05, 0.25, 0.3]
    jittered = ops.Backoff(duration=1.0, factor=1.0, jitter=0.5).delays(rand=lambda: 1.0)
    assert jittered() == 1.5


def test_json_patch_must_be_a_list() -> None:
    with pytest.raises(TypeError):
        ops.patch(None, kinds.POD.resource, "p", {"op": "add"}, "ns", patch_type=ops.PatchType.JSON)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ops.patch(None, kinds.POD.resource, "p", [{"op": "add"}], "ns", patch_type=ops.PatchType.MERGE)  # type: ignore[arg-type]


def test_watch_error_event_is_raised_as_the_status_it_carries() -> None:
    from mcm_tasks.kube.errors import is_gone

    line = b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","code":410,"reason":"Expired"}}'
    with pytest.raises(ApiException) as info:
        ops._watch_event(line)
    assert is_gone(info.value)
    assert ops._watch_event(b'{"type":"ADDED","object":{"kind":"Node"}}') == ("ADDED", {"kind": "Node"})
