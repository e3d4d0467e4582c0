"""A batch gives exactly what its packets give one at a time, in arrival order: output
packets (bytes, destinations, order), slot registers and counters; as `Datagram`s or as
`Frames` scattered over a receive buffer. Checked on random
traffic from several jobs sharing a small pool: resends, duplicates, priorities, both
operations, FLUSH requests, returned RESULTs (atp), garbage, idle sweeps."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from switch_support import PATHS, Rig, job_spec, worker_addr

from ina.net.frames import Frames
from ina.net.node import Datagram
from ina.switch import OUTCOMES

JOBS = {1: 3, 2: 2, 3: 1}  # job: workers


def make_rig(policy: str, path: str = "python", fast_path: bool = True) -> Rig:
    rig = Rig(pool=4, words=2, policy=policy, slot_timeout=0.5, path=path)
    rig.register(job_spec(1, workers=3, window=2))
    rig.register(job_spec(2, workers=2, window=4, priority_cap=3))
    rig.register(job_spec(3, workers=1, window=1))
    if not fast_path:
        rig.core._aggregate_runs = lambda p, batch, now, out: np.arange(p.index.size)  # every packet through the rounds
    return rig


words = st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=2)


@st.composite
def packet(draw, rig: Rig) -> Datagram:
    job = draw(st.sampled_from(sorted(JOBS)))
    seq = draw(st.integers(0, 9)) if draw(st.booleans()) else draw(st.integers(2**32 - 4, 2**32 - 1))
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return rig.flush(job, seq, op_max=draw(st.booleans()))
    if choice == 2:  # a RESULT its PS returns (atp; elsewhere unexpected)
        return rig.returned(job, seq, draw(words), op_max=draw(st.booleans()), hold=draw(st.integers(0, 5)) > 0)
    if choice == 1:
        garbage = draw(st.binary(max_size=40))
        return Datagram(garbage, draw(st.sampled_from([worker_addr(job, 0), ("127.0.0.1", 1)])))
    rank = draw(st.integers(0, JOBS[job]))  # rank == n: unregistered
    return rig.data(job, rank % 32, seq, draw(words), resend=draw(st.booleans()), prio=draw(st.integers(0, 6)),
                    op_max=draw(st.integers(0, 5)) == 0, bitmap=1 << (rank % 32))  # fmt: skip


@st.composite
def chunk_burst(draw, rig: Rig) -> list[Datagram]:
    """Every worker of a job sending one chunk, shuffled: what aggregation looks like."""
    job, seq, prio = draw(st.sampled_from(sorted(JOBS))), draw(st.integers(0, 9)), draw(st.integers(0, 6))
    burst = [rig.data(job, r, seq, draw(words), prio=prio) for r in range(JOBS[job])]
    return draw(st.permutations(burst))


@st.composite
def traffic(draw):
    policy = draw(st.sampled_from(["esa", "fcfs", "atp"]))
    template = make_rig(policy)
    pieces = draw(st.lists(st.one_of(packet(template).map(lambda p: [p]), chunk_burst(template)), min_size=1, max_size=14))
    packets = [p for piece in pieces for p in piece]
    cuts = sorted(draw(st.sets(st.integers(1, max(len(packets) - 1, 1)), max_size=6)))
    batches = [packets[a:b] for a, b in zip([0, *cuts], [*cuts, len(packets)]) if a < b]
    ticks = draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    return policy, batches, ticks


def scattered(datagrams: list[Datagram]) -> Frames:
    """Frames as a socket receives them: datagrams spread over one buffer with gaps between them."""
    frames = Frames.of(datagrams)
    gap = 7 * np.arange(len(frames))
    buffer = np.full(frames.buffer.size + 7 * len(frames), 0xEE, dtype=np.uint8)
    for start, length, moved in zip(frames.start, frames.length, frames.start + gap):
        buffer[moved : moved + length] = frames.buffer[start : start + length]
    return Frames(buffer, frames.start + gap, frames.length, frames.peer, frames.addresses)


def run(rig: Rig, batches, ticks, one_at_a_time: bool, as_frames: bool = False) -> list[tuple[bytes, tuple]]:
    sent, now = [], 0.0
    for batch, tick in zip(batches, ticks):
        now += 0.3
        for group in ([p] for p in batch) if one_at_a_time else [batch]:
            out = rig.core.receive_frames(scattered(group), now).datagrams() if as_frames else rig.core.receive(group, now)
            sent += [(d.data, d.addr) for d in out]
        if tick:
            sent += [(d.data, d.addr) for d in rig.core.tick(now)]
    return sent


@pytest.mark.parametrize("path", PATHS)
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=traffic())
def test_batches_equal_one_packet_at_a_time(path, case):
    policy, batches, ticks = case
    batched, framed, single = make_rig(policy, path), make_rig(policy, path), make_rig(policy, path)
    expected = run(single, batches, ticks, one_at_a_time=True)
    assert run(batched, batches, ticks, one_at_a_time=False) == expected
    assert run(framed, batches, ticks, one_at_a_time=False, as_frames=True) == expected
    rigs = [batched, framed]
    if path == "python":  # the Python core's second route: every packet through the rounds
        rounds_only = make_rig(policy, path, fast_path=False)
        assert run(rounds_only, batches, ticks, one_at_a_time=False) == expected
        rigs.append(rounds_only)
    counters = single.core.counters()
    assert counters["rx_packets"] == sum(counters[name] for name in OUTCOMES)  # one outcome per packet
    for rig in rigs:
        assert rig.core.counters() == counters
        registers, reference = rig.core.slots.registers(), single.core.slots.registers()
        assert all(np.array_equal(registers[name], reference[name]) for name in reference)
