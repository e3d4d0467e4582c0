"""The P4 switch on BMv2 against the shared test vectors: every vector in tests/vectors/, replayed
through real BMv2 compiled with that vector's P and K, must give exactly the reference's output
packets (bytes and destinations, in order per destination), counters and slot state. And BMv2's own
egress queues: strict priority under esa, one FIFO under fcfs (docs/protocol.md, "Egress queues")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bmv2_support import HOST, SWITCH_MAC, by_destination, collect, frame, interface_mac, logical, needs_bmv2, port, settle, switch_for  # noqa: F401 (fixtures)
from switch_support import Rig, job_spec, register_vector_jobs

from ina.protocol import INA_PORT
from ina.protocol.header import parse
from ina.switch import SwitchConfig

pytestmark = needs_bmv2

VECTORS = Path(__file__).parent / "vectors"
FILES = sorted(VECTORS.glob("switch_*.json"))


def _addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


@pytest.mark.parametrize("word_group", [0, 2], ids=["one-pass", "word-passes"])
@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_bmv2_replays_a_vector_exactly(path, word_group, port, switch_for):
    """One pass steps all K words, or (word-passes) K / 2 of them, the other half on a word pass of
    their own: the Tofino program's word passes (docs/p4.md), the same outputs, counters and slots."""
    vector = json.loads(path.read_text())
    if vector["short_chunks"]:
        pytest.skip("the P4 program parses K words a chunk: its workers pad every chunk to K (docs/protocol.md, section 2)")
    config = vector["config"]
    switch = switch_for(SwitchConfig(**config), word_group)
    _, wire = port
    host_mac = interface_mac(port[0].host_side)
    register_vector_jobs(switch, vector)
    received = 0
    for number, step in enumerate(vector["steps"]):
        if step.get("tick"):
            switch.tick(step["time"])
        else:
            packet = step["input"]
            wire.send(frame(_addr(packet["src"]), _addr(vector["switch"]), bytes.fromhex(packet["hex"]), host_mac, SWITCH_MAC))
            received += 1
            settle(switch, received)
            switch.tick(step["time"])
        got = collect(wire, len(step["output"]))
        assert by_destination(got) == by_destination(step["output"]), f"step {number}: {step['note']}"
    assert switch.counters() == vector["counters"]
    assert logical(switch.slots()) == logical(vector["slots"])


@pytest.mark.parametrize("policy", ["esa", "fcfs"])
def test_bmv2_serves_its_egress_queue_by_priority_under_esa_only(policy, port, switch_for):
    """A port slowed to 10 packets/s: 30 priority-0 RESENDs, forwarded to the PS, and then a priority-63
    one build a backlog. Under esa the priority-63 RESEND is the next to leave once it is queued, so no
    later than the packets that had left by then (at most the port's tx count once the switch has
    decided all 31, which BMv2 counts as they leave the queue); under fcfs it leaves last."""
    switch = switch_for(SwitchConfig(pool=8, words=4, policy=policy))
    _, wire = port
    host_mac = interface_mac(port[0].host_side)
    rig, spec = Rig(pool=8, words=4, policy=policy), job_spec(1, workers=2, window=8)
    assert switch.register(spec)["slot_base"] == rig.register(spec)
    switch.device.thrift.set_port_rate(1, 10)  # BMv2 times each packet's departure as it is queued
    backlog = [rig.data(1, 0, seq, resend=True, prio=0) for seq in range(30)]
    for datagram in [*backlog, rig.data(1, 0, 30, resend=True, prio=63)]:  # RESENDs on free slots: forwarded
        wire.send(frame(datagram.addr, (HOST, INA_PORT), datagram.data, host_mac, SWITCH_MAC))
    queued = settle(switch, 31, timeout=30)
    assert queued["resend_forwarded"] == 31
    left = queued["tx_packets"]  # counted on leaving the queue (BMv2's egress comes after it)
    order = [parse(bytes.fromhex(packet["hex"]), 4)[0].priority for packet in collect(wire, 31)]
    assert len(order) == 31 and left < 30, (order, left)
    if policy == "esa":
        assert order.index(63) <= left, (order, left)
    else:
        assert order.index(63) == 30, order


@pytest.mark.parametrize("words, word_group", [(4, 0), (6, 2)], ids=["one-pass", "word-passes"])
@pytest.mark.parametrize("policy", ["esa", "fcfs"])
def test_bmv2_first_packets_of_a_chunk_sent_at_once_all_aggregate(policy, words, word_group, port, switch_for):
    """Every worker's first packet of a chunk, sent back to back to a slot another job's key left:
    each can find it free on its first pass and take the claim pass, where the first claims it and
    the others add to it (docs/p4.md, "Passes"), as the reference does; none goes to the PS. With
    word passes (three groups of two words) each group is stepped in the order of the first."""
    switch = switch_for(SwitchConfig(pool=8, words=words, policy=policy), word_group)
    _, wire = port
    host_mac = interface_mac(port[0].host_side)
    rig, spec = Rig(pool=8, words=words, policy=policy), job_spec(1, workers=3, window=2)
    assert switch.register(spec)["slot_base"] == rig.register(spec)
    packets = [rig.data(1, rank, 0) for rank in range(3)]
    expected = rig.core.receive(packets, 0.0)
    for datagram in packets:
        wire.send(frame(datagram.addr, (HOST, INA_PORT), datagram.data, host_mac, SWITCH_MAC))
    got = collect(wire, len(expected))
    assert by_destination(got) == by_destination([{"dst": "%s:%d" % d.addr, "hex": d.data.hex()} for d in expected])
    counts = settle(switch, 3)
    assert {k: v for k, v in counts.items() if v} == {k: v for k, v in rig.core.counters().items() if v}
    assert counts["claimed"] == 1 and counts["aggregated"] == 2 and counts["collision"] == 0
