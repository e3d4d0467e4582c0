"""Differential fuzzing of the native switch against the Python reference (docs/protocol.md, section 5).

Random traffic mixes real aggregation (bursts of a chunk from every worker, of K words or fewer, resends,
FLUSH requests, returned and descending RESULTs, idle sweeps; among the jobs a racked job's leaf and another's
spine, section 10) with hostile packets: truncated or extended valid packets, valid headers with one
field set to a random value (kind, job, rank, slot, lane and index bits, flags, bitmap), packets
from foreign sources, and random bytes. Both cores get the same batches; after every batch and
sweep their output packets (bytes, destinations, order), counters and slot registers must be
identical, so the native core neither crashes nor counts a bad packet differently.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from switch_support import NATIVE_BUILT, Rig, job_spec, ps_addr, worker_addr

from ina.control import Endpoint, JobSpec
from ina.control.jobs import Uplink
from ina.net.node import Datagram
from ina.protocol import Flag
from ina.switch import OUTCOMES
from ina.switch.core import DROPS

pytestmark = pytest.mark.skipif(not NATIVE_BUILT, reason="the native switch is not built (or INA_NATIVE_PACKETS=0)")

JOBS = {1: 3, 2: 2, 3: 1, 4: 32, 5: 2, 6: 3}  # job: workers
LEAF, SPINE = 5, 6
"""Job 5 is served as rack 1's leaf (its sums go up to UPLINK), job 6 as the spine of its 3 leaves (docs/protocol.md, section 10)."""
UPLINK, RACK, RACKS_FULL = ("127.0.0.1", 47100), 1, 0b111
WORDS = 3
FIELDS = {"kind": 2, "flags": 3, "job": 4, "rank": 6, "priority": 7, "slot": 12, "index_bits": 14, "lane_bits": 15, "bitmap": 16}
"""Byte offsets of the header fields a mutation may overwrite (section 2)."""


def make_rig(policy: str, path: str) -> Rig:
    """Jobs 1-4 fill a pool of 8 with partitions; the racked jobs then share it with them (under static, which never
    shares, they take partitions of a pool of 16: the leaf the one its spine chose, slots 10-11)."""
    static = policy == "static"
    pool = 16 if static else 8
    rig = Rig(pool=pool, words=WORDS, policy=policy, slot_timeout=0.5, path=path)
    rig.register(job_spec(1, workers=3, window=2))
    rig.register(job_spec(2, workers=2, window=4, priority_cap=3))
    rig.register(job_spec(3, workers=1, window=1, lane_bits=16))
    rig.register(job_spec(4, workers=32, window=1, lane_bits=32))
    uplink = Uplink(*UPLINK, rack=RACK, racks=3, slot_base=10 if static else 1, span=2 if static else pool, pool=pool)
    rig.register(JobSpec(LEAF, tuple(Endpoint(*worker_addr(LEAF, r)) for r in range(JOBS[LEAF])), 2, ps=Endpoint(*ps_addr(LEAF)),
                         uplink=uplink))  # fmt: skip
    rig.register(JobSpec(SPINE, tuple(Endpoint(*worker_addr(SPINE, r)) for r in range(JOBS[SPINE])), 2, priority_cap=200,
                         ps=Endpoint(*ps_addr(SPINE)), level="spine"))  # fmt: skip
    return rig


def flagged(packet: Datagram, flags: Flag, source: tuple[str, int] | None = None) -> Datagram:
    """`packet` with `flags` set too (and from `source`)."""
    data = bytearray(packet.data)
    data[3] |= int(flags)
    return Datagram(bytes(data), source or packet.addr)


def data(rig: Rig, job: int, rank: int, seq: int, values: list[int], **how) -> Datagram:
    """A worker's DATA; at the spine job a leaf's sum, flagged SPINE."""
    packet = rig.data(job, rank, seq, values, **how)
    return flagged(packet, Flag.SPINE) if job == SPINE else packet


def result(rig: Rig, job: int, seq: int, values: list[int], op_max: bool) -> Datagram:
    """A RESULT coming back: at the leaf job its spine's (SPINE, every rack), else its PS's under atp (HOLD; the spine
    job's flagged SPINE too)."""
    if job == LEAF:
        return flagged(rig.returned(job, seq, values, op_max=op_max, hold=False, bitmap=RACKS_FULL), Flag.SPINE, UPLINK)
    packet = rig.returned(job, seq, values, op_max=op_max)
    return flagged(packet, Flag.SPINE) if job == SPINE else packet


short = st.integers(1, WORDS).flatmap(lambda size: st.lists(st.integers(0, 2**32 - 1), min_size=size, max_size=size))
"""A chunk of K words or fewer (a bucket's tail, a MAX)."""
seqs = st.one_of(st.integers(0, 17), st.integers(0, 17), st.integers(0, 17), st.integers(2**32 - 4, 2**32 - 1), st.integers(0, 2**32 - 1))
NEAR = {"kind": range(9), "flags": range(16), "job": range(8), "rank": range(4), "priority": range(4), "slot": range(9),
        "index_bits": range(10), "lane_bits": (0, 8, 16, 32, 64), "bitmap": (0, 1, 2, 3, 4, 7)}
"""Values near the valid ones for each field, so that a mutation reaches every check, not only the first."""


@st.composite
def valid(draw, rig: Rig) -> Datagram:
    """A DATA, FLUSH or returned RESULT (atp; the leaf job: its spine's RESULT) a registered worker, leaf, PS or
    spine could send (a leaf's RESEND at the spine job, bad_format, now and then)."""
    job = draw(st.sampled_from(sorted(JOBS)))
    seq = draw(seqs)
    kind = draw(st.integers(0, 11))
    if kind == 0:
        return rig.flush(job, seq, op_max=draw(st.booleans()))
    if kind == 1:
        return result(rig, job, seq, draw(short), op_max=draw(st.booleans()))
    resend = draw(st.integers(0, 7)) == 0 if job == SPINE else draw(st.booleans())
    return data(rig, job, draw(st.integers(0, JOBS[job] - 1)), seq, draw(short), resend=resend, prio=draw(st.integers(0, 255)),
                op_max=draw(st.integers(0, 4)) == 0)  # fmt: skip


def other_ps(packet: Datagram) -> tuple[str, int]:
    """Another job's PS address: registered, but not this job's."""
    job = int.from_bytes(packet.data[4:6], "big")
    return ("127.0.0.1", 20000 + (job % 4) + 1)


@st.composite
def hostile(draw, rig: Rig) -> Datagram:
    """A valid packet broken in one way, or random bytes."""
    packet = draw(valid(rig))
    data, source = bytearray(packet.data), packet.addr
    how = draw(st.sampled_from(["truncate", "extend", "field", "field", "kind", "flag", "byte", "source", "random"]))
    if how == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif how == "extend":
        data += draw(st.binary(min_size=1, max_size=12))
    elif how == "field":
        name = draw(st.sampled_from(sorted(FIELDS)))
        at, width = FIELDS[name], 4 if name == "bitmap" else 2 if name in ("job", "slot") else 1
        data[at : at + width] = draw(st.one_of(st.sampled_from(NEAR[name]), st.integers(0, 256**width - 1))).to_bytes(width, "big")
    elif how == "kind":  # another kind, with the length that kind needs: past the malformed check
        kind = draw(st.integers(1, 8))
        data[2] = kind
        data = data if kind in (1, 2, 3) else data[:20]
    elif how == "flag":  # one flag toggled: RESEND, MAX, HOLD or SPINE, each checked by kind and role
        data[3] ^= 1 << draw(st.integers(0, 3))
    elif how == "byte":
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    elif how == "source":
        source = draw(st.sampled_from([("127.0.0.1", 1), ("10.1.2.3", source[1]), worker_addr(1, 1), other_ps(packet), UPLINK]))
    else:
        data = bytearray(draw(st.binary(max_size=80)))
    return Datagram(bytes(data), source)


@st.composite
def burst(draw, rig: Rig) -> list[Datagram]:
    """Workers of a job sending one chunk, shuffled: all of them, or some (a partial stays in its
    slot), with duplicates now and then, maybe followed by a RESEND, a FLUSH or the chunk's RESULT coming back."""
    job, seq, prio = draw(st.sampled_from(sorted(JOBS))), draw(st.one_of(st.integers(0, 7), seqs)), draw(st.integers(0, 255))
    op_max = draw(st.integers(0, 4)) == 0
    ranks = range(JOBS[job]) if draw(st.booleans()) else sorted(draw(st.sets(st.integers(0, JOBS[job] - 1), min_size=1)))
    size = draw(st.sampled_from([WORDS, WORDS, 1, draw(st.integers(1, WORDS))]))  # every rank cuts the chunk alike
    sized = st.lists(st.integers(0, 2**32 - 1), min_size=size, max_size=size)
    packets = [data(rig, job, r, seq, draw(sized if draw(st.integers(0, 9)) else short), prio=prio, op_max=op_max) for r in ranks]
    packets += draw(st.lists(st.sampled_from(packets), max_size=2))
    packets = draw(st.permutations(packets))
    after = draw(st.sampled_from(["none", "resend", "flush", "back", "back"]))
    if after == "resend":
        packets.append(data(rig, job, draw(st.sampled_from(list(ranks))), seq, draw(sized), prio=prio, op_max=op_max, resend=True))
    elif after == "flush":
        packets.append(rig.flush(job, seq, op_max=op_max))
    elif after == "back":
        packets.append(result(rig, job, seq, draw(sized), op_max))
    return packets


@st.composite
def traffic(draw):
    policy = draw(st.sampled_from(["esa", "esa", "fcfs", "atp", "static"]))
    template = make_rig(policy, "python")
    single = st.one_of(valid(template), hostile(template), hostile(template)).map(lambda p: [p])
    pieces = draw(st.lists(st.one_of(single, single, burst(template)), min_size=3, max_size=24))
    packets = [p for piece in pieces for p in piece]
    cuts = sorted(draw(st.sets(st.integers(1, max(len(packets) - 1, 1)), max_size=8)))
    batches = [packets[a:b] for a, b in zip([0, *cuts], [*cuts, len(packets)]) if a < b]
    return policy, batches, draw(st.lists(st.floats(0.0, 0.4), min_size=len(batches), max_size=len(batches)))


def assert_same(native: Rig, reference: Rig) -> None:
    assert native.core.counters() == reference.core.counters()
    ours, theirs = native.core.slots.registers(), reference.core.slots.registers()
    for name, array in theirs.items():
        assert np.array_equal(ours[name], array), name
    assert native.core.next_deadline() == reference.core.next_deadline()
    assert native.core.jobs() == reference.core.jobs()  # with each job's counters
    _same_waiting(native.core.waiting(), reference.core.waiting())


def _same_waiting(ours, theirs) -> None:
    for name in ("job", "chunk", "present"):
        assert np.array_equal(getattr(ours, name), getattr(theirs, name)), name


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic())
def test_the_native_switch_does_exactly_what_the_python_switch_does(case):
    policy, batches, steps = case
    native, reference = make_rig(policy, "native"), make_rig(policy, "python")
    now = 0.0
    for batch, step in zip(batches, steps):
        now += step
        expected = [(d.data, d.addr) for d in reference.core.receive(batch, now)]
        assert [(d.data, d.addr) for d in native.core.receive(batch, now)] == expected
        assert_same(native, reference)
        deadline = reference.core.next_deadline()
        if deadline is not None and deadline <= now + step:
            swept = [(d.data, d.addr) for d in reference.core.tick(now + step)]
            assert [(d.data, d.addr) for d in native.core.tick(now + step)] == swept
            assert_same(native, reference)
    counters = native.core.counters()
    assert counters["rx_packets"] == sum(counters[name] for name in OUTCOMES) == sum(map(len, batches))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_hostile_packet_is_counted_as_the_python_switch_counts_it_and_changes_nothing(data):
    native, reference = make_rig("esa", "native"), make_rig("esa", "python")
    warmup = [native.data(1, 0, 1), native.data(2, 1, 2, prio=2), native.flush(2, 3)]
    for rig in (native, reference):
        rig.core.receive(warmup, 0.5)
    before = native.core.slots.registers()
    count = data.draw(st.integers(1, 12))
    for _ in range(count):
        packet = data.draw(hostile(reference))
        expected = [(d.data, d.addr) for d in reference.core.receive([packet], 1.0)]
        assert [(d.data, d.addr) for d in native.core.receive([packet], 1.0)] == expected
        assert native.core.counters() == reference.core.counters()
    assert_same(native, reference)
    if sum(native.core.counters()[name] for name in DROPS) == count:  # every one dropped (some mutations stay valid)
        after = native.core.slots.registers()
        assert all(np.array_equal(before[name], after[name]) for name in before)


def test_a_native_frame_that_lies_outside_its_buffer_is_refused_not_read():
    rig = make_rig("esa", "native")
    native = rig.core._core
    data = rig.data(1, 0, 0).data
    start, length = np.array([0], np.int64), np.array([len(data) + 1], np.int64)
    with pytest.raises(ValueError, match="outside the buffer"):
        native.receive(data, start.tobytes(), length.tobytes(), np.zeros(1, np.uint32).tobytes(), np.zeros(1, np.uint16).tobytes(), 0.0)
    assert rig.core.counters()["rx_packets"] == 0
