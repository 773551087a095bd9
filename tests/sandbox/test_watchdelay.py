"""The watch-delay proxy's per-resource delays (``--delay-for``): which watches they hold, and the
one-line error for a malformed one."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from mcm_sandbox.watchdelay import main, parse_delay_for, resource_of


def test_a_watch_is_of_the_last_segment_of_its_path() -> None:
    path = "/apis/machine.sapcloud.io/v1alpha1/namespaces/default/machinesets?watch=1"
    sets = make_mocked_request("GET", path)
    nodes = make_mocked_request("GET", "/api/v1/nodes/?watch=true")
    assert (resource_of(sets), resource_of(nodes)) == ("machinesets", "nodes")


def test_delays_per_resource_parse_and_bad_ones_are_named() -> None:
    assert parse_delay_for(["machinesets=2", "machines=0.5"]) == {"machinesets": 2.0, "machines": 0.5}
    for bad in ("machinesets", "=2", "machines=soon", "machines=-1", "machines=99999"):
        with pytest.raises(ValueError, match="RESOURCE=SECONDS"):
            parse_delay_for([bad])


def test_a_malformed_delay_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--upstream", "http://127.0.0.1:1", "--port", "1", "--delay-for", "machines=soon"])
    assert exit_.value.code == 2
    assert "--delay-for 'machines=soon'" in capsys.readouterr().err
