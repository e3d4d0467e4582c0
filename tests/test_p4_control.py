"""The BMv2 switch's command line and routes: bad configuration fails at start, saying what to change."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ina.p4.controller import Route


def test_routes_parse_from_ip_mac_and_port():
    assert Route.parse("10.0.0.2=02:00:00:00:00:02@2") == Route("10.0.0.2", "02:00:00:00:00:02", 2)
    for bad in ("10.0.0.2", "10.0.0.2=02:00:00:00:00:02", "host=02:00:00:00:00:02@2", "10.0.0.2=zz@2", "10.0.0.2=02:00@x"):
        with pytest.raises(ValueError, match="expected IP=MAC@PORT"):
            Route.parse(bad)


@pytest.mark.parametrize("arguments, message", [
    (["--interface", "veth1"], "--interface 'veth1': expected PORT@IFACE"),
    (["--interface", "1@veth1", "--listen", "10.0.0.1:5000"], "the P4 switch knows ina packets by UDP port 47100"),
    ([], "the BMv2 switch needs ports"),
    (["--interface", "1@veth1", "--drop", "0.1"], "fault injection is the software switch's"),
    (["--interface", "1@veth1", "--route", "10.0.0.1@1"], "expected IP=MAC@PORT"),
])  # fmt: skip
def test_a_bad_bmv2_configuration_stops_at_start_with_what_to_change(arguments, message):
    done = subprocess.run([sys.executable, "-m", "ina.cli", "switch", "--target", "bmv2", *arguments],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and message in done.stderr, done.stderr
