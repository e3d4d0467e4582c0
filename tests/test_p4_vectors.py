"""The P4 switch on BMv2 against the shared test vectors: every vector in tests/vectors/, replayed
through real BMv2 compiled with that vector's P and K, must give exactly the reference's output
packets (bytes and destinations, in order per destination), counters and slot state. And BMv2's own
egress queues: strict priority as the queues setting says, whatever the policy, or one FIFO a port
(docs/protocol.md, "Egress queues")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bmv2_support import HOST, SWITCH_MAC, by_destination, collect, frame, interface_mac, logical, needs_bmv2, port, settle, switch_for  # noqa: F401 (fixtures)
from switch_support import Rig, job_spec, register_vector_jobs

from ina.protocol import INA_PORT, Flag
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


def _departures(switch, port, packets: list, outputs: int) -> tuple[list[bytes], int]:
    """The ina payloads BMv2 sends for `packets`, sent back to back to a port slowed to 10 packets/s, in the order they
    leave; and how many had left once the switch had decided them all (BMv2 counts tx as a packet leaves its queue,
    and times each packet's departure as it is queued)."""
    _, wire = port
    host_mac = interface_mac(port[0].host_side)
    received = switch.counters()["rx_packets"] + len(packets)
    switch.device.thrift.set_port_rate(1, 10)
    for datagram in packets:
        wire.send(frame(datagram.addr, (HOST, INA_PORT), datagram.data, host_mac, SWITCH_MAC))
    left = settle(switch, received, timeout=30)["tx_packets"]
    sent = [bytes.fromhex(packet["hex"]) for packet in collect(wire, outputs)]
    assert len(sent) == outputs and left < outputs - 1, (len(sent), left)
    return sent, left


@pytest.mark.parametrize("policy, queues", [("esa", "priority"), ("fcfs", "priority"), ("atp", "priority"), ("esa", "fifo")])
def test_bmv2_serves_its_egress_queues_by_priority_as_its_queues_setting_says(policy, queues, port, switch_for):
    """30 priority-0 RESENDs forwarded to the PS build a backlog; a priority-63 one sent last is the next to leave once
    it is queued (no later than the packets that had left by then) with priority queues, whatever the policy, and
    leaves last with one FIFO a port. (BMv2 runs with its eight queues either way, so that the order is the program's.)"""
    switch = switch_for(SwitchConfig(pool=8, words=4, policy=policy, queues=queues))
    rig, spec = Rig(pool=8, words=4, policy=policy), job_spec(1, workers=2, window=8)
    assert switch.register(spec)["slot_base"] == rig.register(spec)
    backlog = [rig.data(1, 0, seq, resend=True, prio=0) for seq in range(30)]
    sent, left = _departures(switch, port, [*backlog, rig.data(1, 0, 30, resend=True, prio=63)], 31)  # RESENDs on free slots: forwarded
    order = [parse(data, 4)[0].priority for data in sent]
    assert switch.counters()["resend_forwarded"] == 31
    if queues == "priority":
        assert order.index(63) <= left, (order, left)
    else:
        assert order.index(63) == 30, order


@pytest.mark.parametrize("queues", ["priority", "fifo"])
def test_bmv2_sends_a_held_result_before_results_nobody_waits_for_with_priority_queues(queues, port, switch_for):
    """atp: 30 RESULTs the PS returns, passed on to both workers (queue 0), build a backlog; the held RESULT of a chunk
    completed after them, which a step waits for, takes queue 1 and passes them with priority queues (docs/protocol.md,
    "Egress queues"), and leaves last with one FIFO a port. The chunk's slot is claimed first, at full speed: a claim
    pass recirculates through the port's queue."""
    switch = switch_for(SwitchConfig(pool=8, words=4, policy="atp", queues=queues))
    rig, spec = Rig(pool=8, words=4, policy="atp"), job_spec(1, workers=2, window=8)
    assert switch.register(spec)["slot_base"] == rig.register(spec)
    first = rig.data(1, 0, 30)
    port[1].send(frame(first.addr, (HOST, INA_PORT), first.data, interface_mac(port[0].host_side), SWITCH_MAC))
    settle(switch, 1)
    returns = [rig.returned(1, seq, [seq] * 4) for seq in range(30)]
    sent, left = _departures(switch, port, [*returns, rig.data(1, 1, 30)], 61)
    held = [i for i, data in enumerate(sent) if parse(data, 4)[0].flags & Flag.HOLD]
    assert switch.counters()["releases"] == 30 and len(held) == 1
    if queues == "priority":
        assert held[0] <= left, (held, left)
    else:
        assert held[0] == 60, held


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
