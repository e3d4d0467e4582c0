"""The BMv2 switch's command line and routes: bad configuration fails at start, saying what to change;
and its control API under an operator policy."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from bmv2_support import VethPair, Wire, frame, interface_mac, needs_bmv2

from ina.p4.entries import Route


def test_routes_parse_from_ip_mac_and_port():
    assert Route.parse("10.0.0.2=02:00:00:00:00:02@2") == Route("10.0.0.2", "02:00:00:00:00:02", 2)
    for bad in ("10.0.0.2", "10.0.0.2=02:00:00:00:00:02", "host=02:00:00:00:00:02@2", "10.0.0.2=zz@2", "10.0.0.2=02:00@x"):
        with pytest.raises(ValueError, match="expected IP=MAC@PORT"):
            Route.parse(bad)


@pytest.mark.parametrize("arguments, message", [
    (["--interface", "veth1"], "--interface 'veth1': expected PORT@IFACE"),
    (["--interface", "1@veth1", "--listen", "10.0.0.1:5000"], "the P4 switch knows ina packets by UDP port 47100"),
    (["--interface", "1@veth1", "--listen", "0.0.0.0:47100"], "the P4 switch takes only the ina packets addressed to it"),
    ([], "the BMv2 switch needs ports"),
    (["--interface", "1@veth1", "--drop", "0.1"], "fault injection is the software switch's"),
    (["--interface", "1@veth1", "--route", "10.0.0.1@1"], "expected IP=MAC@PORT"),
])  # fmt: skip
def test_a_bad_bmv2_configuration_stops_at_start_with_what_to_change(arguments, message):
    done = subprocess.run([sys.executable, "-m", "ina.cli", "switch", "--target", "bmv2", *arguments],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and message in done.stderr, done.stderr


@needs_bmv2
def test_on_bmv2_tenants_get_their_caps_and_quotas_and_cannot_touch_each_others_jobs(tmp_path):
    """The P4 switch's control API under an operator policy, with BMv2 behind it: the capped
    priority reaches the data plane, and refused requests write nothing."""
    from control_support import OPERATOR_TOKEN, TOKENS, spec, write_policy

    from ina.control.auth import Access
    from ina.control.http import ControlClient, ControlError
    from ina.control.policy import Policy
    from ina.p4.bmv2_device import Bmv2Device
    from ina.p4.entries import Route
    from ina.p4.server import P4SwitchServer
    from ina.protocol import INA_PORT, Header, Kind
    from ina.switch import SwitchConfig

    veth = VethPair("c")
    wire = Wire(veth.host_side)
    access = Access(OPERATOR_TOKEN, Policy(write_policy(tmp_path)))
    routes = [Route("127.0.0.1", interface_mac(veth.host_side), 1)]
    try:
        with P4SwitchServer(SwitchConfig(pool=32, words=4), ("127.0.0.1", INA_PORT), ("127.0.0.1", 0),
                            lambda: Bmv2Device.start({1: veth.switch_side}), routes, "02:00:00:00:00:01", access=access) as server:  # fmt: skip
            a, b = (ControlClient(*server.control_address, token=TOKENS[name]) for name in "ab")
            registered = a.register(spec(100, window=8))
            assert registered["priority_cap"] == 100  # asked 255, tenant a's cap
            for attempt in (lambda: a.register(spec(101, window=1)),  # over a's 8 slots
                            lambda: b.deregister(100), lambda: b.register(spec(100))):  # fmt: skip
                with pytest.raises(ControlError, match="403"):
                    attempt()
            assert [(j["job"], j["owner"], j["priority_cap"]) for j in a.jobs()] == [(100, "a", 100)]
            worker = spec(100).workers[0]
            data = Header(Kind.DATA, job=100, seq=0, rank=0, priority=255, slot=registered["slot_base"], lane_bits=8, bitmap=1)
            wire.send(frame(worker.addr, ("127.0.0.1", INA_PORT), data.pack(bytes(16)), interface_mac(veth.host_side), "02:00:00:00:00:01"))
            deadline = time.monotonic() + 5
            while server.switch.counters()["claimed"] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert [(s["key"], s["prio"]) for s in server.switch.slots()] == [({"job": 100, "seq": 0, "max": False}, 100)]
            # The watch reads the slot registers: job 100 holds one slot, waiting for rank 1.
            operator = ControlClient(*server.control_address, token=OPERATOR_TOKEN)
            while operator.job(100).get("held") != 1 and time.monotonic() < deadline + 5:
                time.sleep(0.1)
            job = operator.job(100)
            assert job["held"] == 1 and job["ranks"][1]["waiting_chunks"] == 1 and job["ranks"][0]["waiting_chunks"] == 0, job
            scraped = operator.metrics()
            assert 'ina_switch_job_held{job="100",tenant="a"} 1.0' in scraped, scraped
            assert f"ina_switch_claimed_total {float(operator.counters()['claimed'])}" in scraped
            a.deregister(100)
            assert a.jobs() == [] and server.switch.slots() == []
    finally:
        wire.close()
        veth.close()
