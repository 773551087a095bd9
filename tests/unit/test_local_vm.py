"""A local VM's derived state and its Redis hash form."""

from __future__ import annotations

from providers.local.cloud import LocalVM, VMState


def vm(**over: object) -> LocalVM:
    base: dict[str, object] = {
        "id": "i-1",
        "provider_id": "local:///local-a/i-1",
        "machine": "m1",
        "machine_class": "ns/small",
        "zone": "local-a",
        "region": "local",
        "instance_type": "local.small",
        "architecture": "amd64",
        "capacity": {"cpu": "2"},
        "labels": {"a": "b"},
        "internal_ip": "10.0.0.2",
        "created": 100.0,
        "ready_at": 105.0,
    }
    base.update(over)
    return LocalVM.model_validate(base)


def test_state_follows_the_clock() -> None:
    v = vm()
    assert v.state(104.9) is VMState.PENDING and not v.joins(104.9)
    assert v.state(105.0) is VMState.RUNNING and v.joins(105.0)
    gone = vm(deleting_at=110.0, gone_at=112.0)
    assert gone.state(111.0) is VMState.TERMINATING and not gone.joins(111.0) and not gone.live()
    assert not gone.gone(111.9) and gone.gone(112.0)


def test_never_join_runs_but_does_not_join() -> None:
    v = vm(never_join=True)
    assert v.state(200.0) is VMState.RUNNING and not v.joins(200.0)


def test_hash_round_trip_keeps_every_field() -> None:
    v = vm(never_join=True, deleting_at=110.0, gone_at=112.5, user_data_len=12)
    data = v.to_hash()
    assert all(isinstance(x, str) for x in data.values())
    assert LocalVM.from_hash(data) == v
    assert LocalVM.from_hash({k.encode(): x.encode() for k, x in data.items()}) == v


def test_unset_optional_fields_stay_out_of_the_hash() -> None:
    assert "deleting_at" not in vm().to_hash()
