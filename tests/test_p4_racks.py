"""The BMv2 program as a racked job's leaf or spine (docs/protocol.md, section 10; p4src/racks.p4): the scenarios of
tests/test_switch_racks.py replayed through real BMv2, in one pass and over word passes, each giving the exact bytes
those tests name and exactly the packets, counters and slots of the software switch fed the same packets."""

from __future__ import annotations

import dataclasses
import subprocess

import numpy as np
import pytest
from bmv2_support import HOST, SWITCH_MAC, Replay, far_port, frame, interface_mac, needs_bmv2, port, replay, run, switch_for, udp_of  # noqa: F401 (fixtures)
from switch_support import Rig, job_spec, ps_addr, worker_addr
from test_switch_racks import JOB, LEAVES, POOL, RACK, RACKS, SPINE_ADDR, WORDS, leaf_spec, spine_result, spine_spec, sum_up

from ina.control import Endpoint, JobSpec
from ina.control.jobs import Uplink
from ina.net.impair import egress_rules
from ina.net.node import Datagram
from ina.protocol import INA_PORT, Flag, Header, Kind, parse
from ina.switch import SwitchConfig

pytestmark = [needs_bmv2, pytest.mark.parametrize("word_group", [0, 2], ids=["one-pass", "word-passes"])]

OTHER = 7
"""A job of one switch beside the racked one, to preempt and be preempted."""
FAR_IP = "10.99.0.2"
"""A host beyond the switch's second port: a leaf, or a PS that listens at the ina port."""


def flags(data: bytes) -> Flag:
    return parse(data, WORDS)[0].flags


def in_slot(data: bytes, slot: int) -> bytes:
    header, payload = parse(data, WORDS)
    return header.with_(slot=slot).pack(payload)


def leaf_data(pair: Replay, seq: int, values: list[int], prio: int, rack: int) -> Datagram:
    return Datagram(sum_up(pair.rig, seq, values, prio=prio, rack=rack), LEAVES[rack])


def test_a_leaf_sends_its_racks_sum_up_as_one_spine_data_and_frees_the_slot(replay):
    pair = replay(leaf_spec())
    rig = pair.rig
    assert pair.send(rig.data(JOB, 0, 6, [1, 2, 3, 4], prio=9)) == []
    assert pair.send(rig.data(JOB, 1, 6, [10, 20, 30, 40], prio=3)) == [(SPINE_ADDR, sum_up(rig, 6, [11, 22, 33, 44], prio=9))]
    assert pair.switch.counters()["sent_up"] == 1
    assert pair.switch.slots() == []


def test_a_leaf_of_a_one_worker_rack_sends_each_chunk_up_as_it_claims_the_slot(replay):
    """A claim pass (the slot never held a key) that completes: its priority is the claim's."""
    pair = replay(leaf_spec(workers=1))
    rig = pair.rig
    assert pair.send(rig.data(JOB, 0, 3, [5, 6, 7, 8], prio=4)) == [(SPINE_ADDR, sum_up(rig, 3, [5, 6, 7, 8], prio=4))]
    assert pair.send(rig.data(JOB, 0, 3 + POOL, [1, 1, 1, 1], op_max=True)) == [(SPINE_ADDR, sum_up(rig, 3 + POOL, [1, 1, 1, 1], op_max=True))]


def test_a_leaf_passes_the_spines_result_down_to_its_rack_unchanged(replay):
    pair = replay(leaf_spec())
    result = spine_result(pair.rig, 6, [1, 2, 3, 4])
    assert pair.send(Datagram(result, SPINE_ADDR)) == [(worker_addr(JOB, 0), result), (worker_addr(JOB, 1), result)]
    assert pair.switch.counters()["descended"] == 1


@pytest.mark.parametrize("why, packet, counter", [
    ("not from the spine", lambda rig: Datagram(spine_result(rig, 6, [1] * WORDS), ps_addr(JOB)), "unregistered"),
    ("without SPINE", lambda rig: Datagram(spine_result(rig, 6, [1] * WORDS, flags=Flag.NONE), SPINE_ADDR), "bad_format"),
    ("a bitmap of other racks", lambda rig: Datagram(spine_result(rig, 6, [1] * WORDS, bitmap=0b11), SPINE_ADDR), "bad_format"),
    ("in another slot", lambda rig: Datagram(in_slot(spine_result(rig, 6, [1] * WORDS), rig.slot(JOB, 7)), SPINE_ADDR), "bad_slot"),
    ("a worker's DATA flagged SPINE", lambda rig: rig.data(JOB, 0, 6, flags=Flag.SPINE), "bad_format"),
])  # fmt: skip
def test_a_leaf_drops_and_counts_what_is_not_its_racks(replay, why, packet, counter):
    pair = replay(leaf_spec())
    assert pair.send(packet(pair.rig)) == [], why
    assert pair.switch.counters()[counter] == 1


def test_a_leafs_partials_and_forwards_are_its_racks_as_on_a_switch_of_one_level(replay):
    """A RESEND's flush, the PS's FLUSH and a RESEND forwarded: PARTIALs without SPINE, to the PS."""
    pair = replay(leaf_spec(workers=3))
    rig = pair.rig
    pair.send(rig.data(JOB, 0, 6), rig.data(JOB, 1, 6))
    assert [addr for addr, _ in pair.send(rig.data(JOB, 1, 6, resend=True))] == [ps_addr(JOB)]
    pair.send(rig.data(JOB, 2, 7), rig.flush(JOB, 7), rig.data(JOB, 0, 7, resend=True))


def test_a_spine_sums_its_leaves_and_flags_its_result_to_every_leaf_and_the_ps(replay):
    pair = replay(spine_spec())
    assert pair.send(leaf_data(pair, 4, [1, 1, 1, 1], 0, 0), leaf_data(pair, 4, [2, 2, 2, 2], 2, 2)) == []
    result = spine_result(pair.rig, 4, [7, 7, 7, 7])
    assert pair.send(leaf_data(pair, 4, [4, 4, 4, 4], 1, 1)) == [*((leaf, result) for leaf in LEAVES), (ps_addr(JOB), result)]


def test_a_spine_takes_no_unflagged_data_and_no_resend(replay):
    pair = replay(spine_spec())
    slot = pair.rig.slot(JOB, 4)
    plain = Header(Kind.DATA, job=JOB, seq=4, rank=0, slot=slot, lane_bits=8, bitmap=1).pack(np.ones(WORDS, np.uint32))
    resend = Header(Kind.DATA, job=JOB, seq=4, flags=Flag.SPINE | Flag.RESEND, rank=0, slot=slot, lane_bits=8,
                    bitmap=1).pack(np.ones(WORDS, np.uint32))  # fmt: skip
    assert pair.send(Datagram(plain, LEAVES[0]), Datagram(resend, LEAVES[0])) == []
    assert pair.switch.counters()["bad_format"] == 2


def test_a_spines_partial_carries_spine_and_its_racks(replay):
    pair = replay(spine_spec())
    rig = pair.rig
    pair.send(leaf_data(pair, 4, [5, 5, 5, 5], 2, 2))
    partial = Header(Kind.PARTIAL, job=JOB, seq=4, flags=Flag.SPINE, priority=2, slot=rig.slot(JOB, 4), lane_bits=8,
                     bitmap=0b100).pack(np.full(WORDS, 5, np.uint32))  # fmt: skip
    assert pair.send(rig.flush(JOB, 4)) == [(ps_addr(JOB), partial)]


def test_a_spine_flags_its_jobs_partials_whichever_job_evicts_them(replay):
    """Preemption both ways at a spine that also serves a job of its own: the racked job's PARTIAL carries SPINE,
    the other's not; and a newer chunk of the racked job evicts its stale partial, flagged."""
    pair = replay(spine_spec(), job_spec(OTHER, workers=2, window=POOL))
    rig = pair.rig
    racked_seq = 4
    other_seq = next(s for s in range(64) if rig.slot(OTHER, s) == rig.slot(JOB, racked_seq))
    (victim_partial,) = [data for _, data in (pair.send(leaf_data(pair, racked_seq, [3] * WORDS, 1, 0),
                                                        rig.data(OTHER, 0, other_seq, prio=30)))]  # fmt: skip
    assert flags(victim_partial) == Flag.SPINE
    ((_, other_partial),) = pair.send(leaf_data(pair, racked_seq + POOL, [1] * WORDS, 60, 2))
    assert flags(other_partial) == Flag.NONE
    ((_, stale),) = pair.send(leaf_data(pair, racked_seq + 2 * POOL, [1] * WORDS, 60, 1))
    assert flags(stale) == Flag.SPINE


def test_a_switch_forwards_ina_packets_to_other_hosts_by_their_route_and_takes_those_to_itself(port, far_port, switch_for, word_group):
    """docs/protocol.md, section 2: the PS's FLUSH to a leaf that crosses the spine, and a worker's failover DATA to a PS
    listening at the ina port, leave the switch by their route unchanged, counted nowhere and changing no slot, though
    the spine holds the FLUSH's chunk and the DATA would claim a slot; the same packets to the switch are its own."""
    (veth, wire), (far, far_wire) = port, far_port
    host_mac = interface_mac(veth.host_side)
    pair = Replay(switch_for(SwitchConfig(POOL, WORDS), word_group, beyond=((far, FAR_IP),)), Rig(pool=POOL, words=WORDS), wire, host_mac)
    pair.register(spine_spec())
    pair.register(job_spec(OTHER, workers=2, window=4))
    rig = pair.rig
    pair.send(leaf_data(pair, 4, [5] * WORDS, 2, 2))
    flush, data = rig.flush(JOB, 4), rig.data(OTHER, 0, 3)
    for datagram in (flush, data):
        pair.forwarded(frame(datagram.addr, (FAR_IP, INA_PORT), datagram.data, host_mac, interface_mac(far.host_side)), far_wire)
    assert pair.switch.counters()["rx_packets"] == 1
    assert [addr for addr, _ in pair.send(flush)] == [ps_addr(JOB)]
    assert pair.send(data) == []
    assert pair.switch.counters()["rx_packets"] == 3


def test_a_leaf_forwards_its_sums_up_that_bmv2_reads_back_duplicated_on_its_uplink(port, far_port, switch_for, word_group):
    """The testbed duplicates a link's packets with an nftables rule on the egress of both its ends (ina/net/impair.py),
    and BMv2 reads the copies made on its own port as packets in: a leaf's sum up came back in at its uplink, where it
    counted `unregistered` (a DATA from the leaf's own address), 12-28 a racked run (docs/racks.md, "On BMv2"). It is
    addressed to the spine, so it is forwarded, back out the port it came in by: dropped, counted nowhere."""
    (veth, wire), (far, far_wire) = port, far_port
    switch = switch_for(SwitchConfig(POOL, WORDS), word_group, beyond=((far, FAR_IP),))
    rig = Rig(pool=POOL, words=WORDS)
    spec = dataclasses.replace(leaf_spec(), uplink=Uplink(FAR_IP, INA_PORT, RACK, RACKS, 2, POOL, POOL))
    switch.register(spec)
    rig.register(spec)
    data = [rig.data(JOB, 0, 6), rig.data(JOB, 1, 6)]
    ((spine, up),) = [(out.addr, out.data) for out in rig.send(*data)]
    duplicating = egress_rules("ina_test_dup", [far.switch_side], loss=0.0, duplicate=0.999)
    run("nft", "-f", "-", stdin=duplicating)
    try:
        for datagram in data:
            wire.send(frame(datagram.addr, (HOST, INA_PORT), datagram.data, interface_mac(veth.host_side), SWITCH_MAC))
        copies = []
        while (got := far_wire.receive(3.0 if not copies else 0.3)) is not None:
            copies.append(udp_of(got))
        assert len(copies) > 1 and {(c.dst, c.payload) for c in copies} == {(spine, up)}
    finally:
        subprocess.run(["nft", "delete", "table", "netdev", "ina_test_dup"], capture_output=True)
    assert wire.receive(0.3) is None
    assert switch.counters() == rig.core.counters()


@pytest.mark.parametrize("policy, spec", [("esa", dict(slot_base=3, span=POOL)), ("static", dict(slot_base=4, span=4, window=4))])
def test_a_leaf_gives_the_job_the_slots_its_spine_chose(replay, policy, spec):
    pair = replay(policy=policy)
    answer = pair.register(leaf_spec(**spec))
    assert (answer["slot_base"], answer["span"]) == (spec["slot_base"], spec["span"])
    rig = pair.rig
    pair.send(rig.data(JOB, 0, 5), rig.data(JOB, 1, 5))


@pytest.mark.parametrize("level", ["leaf", "spine"])
def test_two_levels_chained_with_bmv2_at_one_give_the_flat_sum(replay, level):
    """Three leaves and a spine, every packet handed on, BMv2 as rack 1's leaf or as the spine and the software
    switch at the others: each worker gets the sum of all seven workers once."""
    sizes = (2, 3, 2)
    bmv2 = replay()
    spine = bmv2 if level == "spine" else Rig(pool=POOL, words=WORDS)
    spine.register(spine_spec())
    base = (bmv2.rig if spine is bmv2 else spine).bases[JOB]
    workers = [[(HOST, 9000 + 10 * rack + r) for r in range(size)] for rack, size in enumerate(sizes)]
    leaves = [bmv2 if level == "leaf" and rack == 1 else Rig(pool=POOL, words=WORDS) for rack in range(RACKS)]
    for rack, leaf in enumerate(leaves):
        leaf.register(JobSpec(JOB, tuple(Endpoint(*w) for w in workers[rack]), 4, ps=Endpoint(*ps_addr(JOB)),
                              uplink=Uplink(*SPINE_ADDR, rack, RACKS, base, POOL, POOL)))  # fmt: skip
    rng = np.random.default_rng(0)
    values = {(rack, r): rng.integers(0, 30, WORDS).tolist() for rack, size in enumerate(sizes) for r in range(size)}
    up = []
    for (rack, r), v in values.items():
        data = Header(Kind.DATA, job=JOB, seq=9, rank=r, slot=(base + 9) % POOL, lane_bits=8, bitmap=1 << r).pack(np.array(v, np.uint32))
        up += [Datagram(out, LEAVES[rack]) for _, out in sent(leaves[rack], Datagram(data, workers[rack][r]))]
    results = sent(spine, *up)
    flat = np.sum(list(values.values()), axis=0).tolist()
    assert [addr for addr, _ in results] == [*LEAVES, ps_addr(JOB)]
    assert {data for _, data in results} == {spine_result(bmv2.rig, 9, flat)}
    down = [out for rack, leaf in enumerate(leaves) for out in sent(leaf, Datagram(results[rack][1], SPINE_ADDR))]
    assert sorted(addr for addr, _ in down) == sorted(w for rack in workers for w in rack)
    assert all(parse(data, WORDS)[1].tolist() == flat for _, data in down)


def sent(switch: Replay | Rig, *datagrams: Datagram) -> list[tuple[tuple[str, int], bytes]]:
    """What a switch of the chain sends: BMv2 (checked against the reference), or the software switch."""
    if isinstance(switch, Replay):
        return switch.send(*datagrams)
    return [(out.addr, out.data) for out in switch.send(*datagrams)]
