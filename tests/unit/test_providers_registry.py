from __future__ import annotations

import pytest

from providers import UnknownProviderError, get_driver
from providers.errors import Code, MachineError, code_of


def test_unknown_provider_is_a_clear_error() -> None:
    with pytest.raises(UnknownProviderError, match="unknown provider 'nope'"):
        get_driver("nope")


def test_codes_are_the_18_of_mcm() -> None:
    assert len(Code) == 18
    assert Code.Uninitialized == 17 and Code.ResourceExhausted == 8


def test_machine_error_is_typed() -> None:
    err = MachineError(Code.NotFound, "gone")
    assert code_of(err) is Code.NotFound
    assert code_of(ValueError("x")) is Code.Internal
    assert "NotFound" in str(err)
