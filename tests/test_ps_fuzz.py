"""Differential fuzzing of the native PS against the Python one (docs/protocol.md, section 6).

Both get the same stream: DATA, PARTIAL and RESULT packets for the registered jobs (through the
switch and from workers, resends, MAX chunks, PS-only indices at the PS's K and at a job's own, a racked
job's pieces of both levels with and without SPINE),
with any field drawn off its valid range, packets truncated, extended and mutated, random bytes,
strangers, ticks, and jobs leaving and coming back. The native PS must never crash and must answer
exactly as the reference: the same datagrams in the same order, the same counters, deadlines and jobs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from ps_support import NATIVE_BUILT

from ina.control import Endpoint, JobSpec
from ina.net.node import Datagram
from ina.protocol import Flag, Header, Kind, result_words
from ina.ps.core import ParameterServer
from ina.ps.native import NativeParameterServer

pytestmark = pytest.mark.skipif(not NATIVE_BUILT, reason="the native PS is not built (or INA_NATIVE_PACKETS=0)")

K = 4
OWN_WORDS = 6  # a PS-only job's own K
SHUFFLED_WORDS = 15  # 4-bit indices: the native PS's byte shuffles take 8 words at a time, then the rest
SWITCH = ("10.0.0.100", 47100)
SPINE = ("10.0.9.100", 47100)
LEAVES = tuple(Endpoint(f"10.0.9.{r + 1}", 47100) for r in range(3))
STRANGER = ("10.0.0.66", 6666)
TABLE = (0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30)
OPTIONS = dict(flush_delay=0.002, piece_timeout=0.05, result_retention=4)


def _workers(job: int, n: int) -> tuple[Endpoint, ...]:
    return tuple(Endpoint(f"10.0.{job}.{rank + 1}", 5000 + rank) for rank in range(n))


SPECS = {
    1: JobSpec(1, _workers(1, 3), window=2, switch=Endpoint(*SWITCH)),  # lanes through the switch
    2: JobSpec(2, _workers(2, 4), window=1, index_bits=4, table=TABLE),  # PS-only indices at the PS's K
    3: JobSpec(3, _workers(3, 2), window=2, index_bits=3, lane_bits=16, table=tuple(range(8)), words=OWN_WORDS),
    4: JobSpec(4, _workers(4, 3), window=2, index_bits=4, table=TABLE, words=SHUFFLED_WORDS),
    5: JobSpec(5, _workers(5, 6), window=2, switch=Endpoint(*SPINE), racks=(2, 3, 1), leaves=LEAVES),  # racks, section 10
}
SOURCES = [SWITCH, SPINE, STRANGER] + [e.addr for spec in SPECS.values() for e in (*spec.workers, *spec.leaves)]


@st.composite
def packets(draw: st.DrawFn) -> bytes:
    """A packet for one of the jobs, mostly well formed, any field possibly off."""
    job = draw(st.sampled_from([1, 2, 3, 3, 4, 5, 5, 99]))
    spec = SPECS.get(job, SPECS[1])
    n, words = spec.fanin, draw(st.sampled_from([spec.words or K, 1, draw(st.integers(1, spec.words or K))]))  # short chunks too
    kind = draw(st.sampled_from([Kind.DATA] * 4 + [Kind.PARTIAL] * 2 + [Kind.RESULT] * 2 + [Kind.FLUSH, Kind.STATUS]))
    flags = draw(st.sampled_from([0, 0, 1, 2, 3])) | (Flag.SPINE if draw(st.integers(0, 3)) == 0 else 0)
    rank = draw(st.integers(0, n)) if draw(st.integers(0, 9)) else draw(st.integers(0, 40))
    is_max = bool(flags & 2)
    index_bits = spec.index_bits if kind != Kind.RESULT or draw(st.booleans()) else 0
    if is_max or draw(st.integers(0, 9)) == 0:
        index_bits = draw(st.sampled_from([0, index_bits, 8]))
    lane_bits = 32 if is_max else spec.lane_bits
    if draw(st.integers(0, 9)) == 0:
        lane_bits = draw(st.sampled_from([8, 16, 32, 7]))
    full = (1 << n) - 1
    if kind == Kind.DATA:
        bitmap = 1 << rank if rank < 32 else 0
    elif kind == Kind.RESULT:
        bitmap = full if draw(st.integers(0, 5)) else draw(st.integers(0, 1 << n))
    else:
        bitmap = draw(st.integers(1, full)) if draw(st.integers(0, 9)) else draw(st.integers(0, 1 << (n + 1)))
    seq = draw(st.integers(0, 10)) if draw(st.integers(0, 9)) else draw(st.sampled_from([2**32 - 1, 2**31, 2**31 + 3]))
    slot = 0 if spec.switch is None else (seq % 4 if draw(st.integers(0, 5)) else 1)
    header = Header(kind, job, seq, flags, rank=min(rank, 255), priority=draw(st.integers(0, 3)), slot=slot,
                    index_bits=index_bits, lane_bits=lane_bits if lane_bits != 7 else 8, bitmap=bitmap)  # fmt: skip
    length = {Kind.DATA: words, Kind.PARTIAL: result_words(words, index_bits, lane_bits if lane_bits != 7 else 8),
              Kind.RESULT: result_words(words, index_bits, lane_bits if lane_bits != 7 else 8)}.get(kind, 0)  # fmt: skip
    values = draw(st.lists(st.sampled_from([0, 1, 2, 7, 0x7FC00000, 0xFFFFFFFF]), min_size=length, max_size=length))
    packet = bytearray(header.pack(np.array(values, dtype=np.uint32)))
    if lane_bits == 7:
        packet[15] = 7
    mutation = draw(st.integers(0, 11))
    if mutation == 0 and packet:
        packet = packet[: draw(st.integers(0, len(packet) - 1))]
    elif mutation == 1:
        packet += bytes(draw(st.integers(1, 8)))
    elif mutation == 2:
        at = draw(st.integers(0, len(packet) - 1))
        packet[at] = draw(st.integers(0, 255))
    elif mutation == 3:
        return draw(st.binary(max_size=48))
    return bytes(packet)


@st.composite
def chunks(draw: st.DrawFn) -> list[Datagram]:
    """One chunk's well-formed pieces in random order: every rank's DATA (some through the switch, some
    resent or lost), or for a job with a switch a PARTIAL of some ranks and the others' DATA, or a racked
    job's pieces of both levels."""
    job = draw(st.sampled_from(sorted(SPECS)))
    spec = SPECS[job]
    n, is_max = spec.fanin, spec.index_bits == 0 and draw(st.booleans())
    words = 1 if is_max else draw(st.sampled_from([spec.words or K, draw(st.integers(1, spec.words or K))]))  # a short chunk too
    seq, flags = draw(st.integers(0, 8)), 2 if is_max else 0
    index_bits, lane_bits = (0, 32) if is_max else (spec.index_bits, spec.lane_bits)
    slot = 0 if spec.switch is None else seq % 4
    ranks = list(range(n))
    out = []
    if spec.racks:
        out, ranks = _racked(draw, spec, seq, flags, words), []
    elif spec.switch is not None and draw(st.booleans()):
        held = draw(st.lists(st.sampled_from(ranks), min_size=1, unique=True))
        bitmap = sum(1 << r for r in held)
        sums = draw(st.lists(st.integers(0, 2**32 - 1), min_size=words, max_size=words))
        partial = Header(Kind.PARTIAL, job, seq, flags, slot=slot, lane_bits=lane_bits, bitmap=bitmap)
        out.append(Datagram(partial.pack(np.array(sums, dtype=np.uint32)), SWITCH))
        ranks = [r for r in ranks if r not in held or draw(st.integers(0, 4)) == 0]  # sometimes an overlapping resend
    for rank in ranks:
        if draw(st.integers(0, 7)) == 0:
            continue  # lost
        resend = draw(st.integers(0, 4)) == 0
        header = Header(Kind.DATA, job, seq, flags | resend, rank=rank, priority=1, slot=slot, index_bits=index_bits,
                        lane_bits=lane_bits, bitmap=1 << rank)  # fmt: skip
        payload = draw(st.lists(st.integers(0, 2**32 - 1), min_size=words, max_size=words))
        source = SWITCH if spec.switch is not None and draw(st.booleans()) else spec.workers[rank].addr
        out.append(Datagram(header.pack(np.array(payload, dtype=np.uint32)), source))
    if draw(st.integers(0, 3)) == 0:  # its result: the switch's copy, or a worker answering a FETCH
        result = Header(Kind.RESULT, job, seq, flags | (Flag.SPINE if spec.racks else 0), slot=slot, index_bits=index_bits,
                        lane_bits=lane_bits, bitmap=(1 << (len(spec.racks) or n)) - 1)  # fmt: skip
        sums = np.arange(result_words(words, index_bits, lane_bits), dtype=np.uint32)
        source = spec.switch.addr if spec.switch is not None and draw(st.booleans()) else draw(st.sampled_from(spec.workers)).addr
        out.append(Datagram(result.pack(sums), source))
    return draw(st.permutations(out))


def _racked(draw: st.DrawFn, spec: JobSpec, seq: int, flags: int, words: int) -> list[Datagram]:
    """A racked chunk's pieces of both levels: the spine's partial of some racks and, for each other rack (sometimes
    one of those too), its sum sent up, its leaf's partial of some workers, or its workers' DATA; some lost, some resent."""
    lane_bits = 32 if flags & Flag.MAX else spec.lane_bits

    def piece(kind: Kind, bitmap: int, source: tuple[str, int], rank: int = 0, extra: int = 0) -> Datagram:
        header = Header(kind, spec.job, seq, flags | extra, rank=rank, priority=1, slot=seq % 4, lane_bits=lane_bits, bitmap=bitmap)
        values = draw(st.lists(st.integers(0, 2**32 - 1), min_size=words, max_size=words))
        return Datagram(header.pack(np.array(values, dtype=np.uint32)), source)

    up = draw(st.integers(0, (1 << len(spec.racks)) - 1))
    out = [piece(Kind.PARTIAL, up, SPINE, extra=Flag.SPINE)] if up else []
    for r, (offset, n) in enumerate(zip(spec.rack_offsets, spec.racks)):
        if up >> r & 1 and draw(st.integers(0, 3)):
            continue
        way, ranks = draw(st.sampled_from(["sum", "leaf", "workers"])), list(range(n))
        if way == "sum":
            out.append(piece(Kind.DATA, 1 << r, draw(st.sampled_from([SPINE, spec.leaves[r].addr])), rank=r, extra=Flag.SPINE))
            continue
        if way == "leaf":
            held = draw(st.lists(st.sampled_from(ranks), min_size=1, unique=True))
            out.append(piece(Kind.PARTIAL, sum(1 << k for k in held), spec.leaves[r].addr))
            ranks = [k for k in ranks if k not in held or draw(st.integers(0, 4)) == 0]
        for k in ranks:
            if draw(st.integers(0, 7)):  # else lost
                source = draw(st.sampled_from([spec.leaves[r].addr, spec.workers[offset + k].addr]))
                out.append(piece(Kind.DATA, 1 << k, source, rank=k, extra=Flag.RESEND if draw(st.integers(0, 4)) == 0 else 0))
    return out


def _source(draw: st.DrawFn, packet: bytes) -> tuple[str, int]:
    """Mostly the rank's registered worker or the switch; sometimes anyone."""
    if draw(st.integers(0, 5)) == 0 or len(packet) < 7:
        return draw(st.sampled_from(SOURCES))
    spec = SPECS.get(int.from_bytes(packet[4:6], "big"), SPECS[1])
    if packet[2] in (Kind.PARTIAL, Kind.RESULT) and spec.switch is not None and draw(st.booleans()):
        return spec.switch.addr
    workers, switches = [w.addr for w in spec.workers], [SWITCH, SPINE, *(leaf.addr for leaf in spec.leaves)]
    return workers[packet[6]] if packet[6] < len(workers) and draw(st.booleans()) else draw(st.sampled_from(workers + switches))


def _same(python: list[Datagram], native: list[Datagram], what: str) -> None:
    assert [(d.data.hex(), d.addr) for d in native] == [(d.data.hex(), d.addr) for d in python], what


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_the_native_ps_answers_every_stream_exactly_as_the_python_one(data):
    python, native = ParameterServer(K, **OPTIONS), NativeParameterServer(K, **OPTIONS)
    for ps in (python, native):
        for spec in SPECS.values():
            ps.register(spec)
    now = 0.0
    for step in range(data.draw(st.integers(1, 40), label="steps")):
        action = data.draw(st.sampled_from(["batch"] * 6 + ["tick", "rejoin"]))
        if action == "batch":
            batch = []
            for _ in range(data.draw(st.integers(1, 24))):
                if data.draw(st.integers(0, 3)) == 0:
                    batch += data.draw(chunks())
                    continue
                packet = data.draw(packets())
                batch.append(Datagram(packet, _source(data.draw, packet)))
            _same(python.receive(batch, now), native.receive(batch, now), f"step {step}: receive")
        elif action == "tick":
            _same(python.tick(now), native.tick(now), f"step {step}: tick")
        else:
            job = data.draw(st.sampled_from(sorted(SPECS)))
            for ps in (python, native):
                ps.deregister(job)
                ps.register(SPECS[job])
        assert native.next_deadline() == python.next_deadline(), f"step {step}: deadline"
        assert native.counters() == python.counters(), f"step {step}: counters"
        ours, theirs = native.waiting(), python.waiting()
        assert all(np.array_equal(getattr(ours, f), getattr(theirs, f)) for f in ("job", "chunk", "present")), f"step {step}: waiting"
        now += data.draw(st.sampled_from([0.0, 0.0005, 0.001, 0.003, 0.02]))
    assert native.jobs() == python.jobs()
    for name, value in python.counters().items():
        if value and name not in ("rx", "tx"):
            event(f"counted {name}")  # what the stream reached (pytest --hypothesis-show-statistics)


@pytest.mark.parametrize("size", [0, 1, 5, 19, 20, 21, 23, 26, 100, 65507])  # none a header and a short chunk
def test_truncated_and_oversized_packets_of_every_kind_never_crash_the_native_ps(size):
    ps = NativeParameterServer(K, **OPTIONS)
    for spec in SPECS.values():
        ps.register(spec)
    rng = np.random.default_rng(size)
    for kind in range(0, 9):
        for job in (1, 2, 3):
            head = Header(Kind.DATA, job, 0, rank=0, lane_bits=8, bitmap=1).pack()
            packet = bytearray(head + rng.integers(0, 256, max(0, size - len(head)), dtype=np.uint8).tobytes())[:size]
            if size > 2:
                packet[2] = kind
            assert ps.receive([Datagram(bytes(packet), SWITCH)], 0.0) == []
    counts = ps.counters()
    assert counts["rx"] == 27 and counts["malformed"] + counts["unexpected"] == 27
