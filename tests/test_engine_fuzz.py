"""The native worker engine against the Python reference, differentially: the same submissions, then
random, truncated and mutated packets (RESULTs forged for outstanding and other chunks, wrong formats,
foreign sources, STATUS, FETCH) and timer ticks into both. Neither crashes, and both send the same
bytes to the same peers, count the same, deliver the same sums and fail with the same message."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ina.net.node import Address, Datagram
from ina.protocol import Flag, Header, Kind, parse, result_words
from ina.transport.engine import Engine, EngineConfig
from ina.transport.native import NativeEngine, native_module
from ina.transport.priority import AttainedServicePriority, FixedPriority, IntensityPriority, RemainingWorkPriority

pytestmark = pytest.mark.skipif(native_module() is None, reason="ina.transport._native is not built")

SWITCH: Address = ("10.0.0.254", 47100)
PS: Address = ("10.0.0.253", 47200)
STRANGER: Address = ("6.6.6.6", 47100)
JOB = 7


def configs(draw) -> EngineConfig:
    ps_only = draw(st.booleans())
    workers = draw(st.integers(1, 4))
    window = draw(st.integers(1, 8))
    return EngineConfig(
        job=JOB, rank=draw(st.integers(0, workers - 1)), workers=workers, words=draw(st.integers(1, 6)), window=window,
        destination=PS if ps_only else SWITCH, sources=frozenset({PS} if ps_only and draw(st.booleans()) else {SWITCH, PS}),
        pool=16, slot_base=draw(st.integers(0, 15)), span=draw(st.sampled_from([0, 8])) if window <= 8 else 0,
        ps_only=ps_only, min_rto=0.001, initial_rto=draw(st.sampled_from([0.001, 0.004])), max_rto=0.01,
        peer_timeout=draw(st.sampled_from([0.03, 1.0])), first_seq=draw(st.sampled_from([0, 2**32 - 3, 2**33 - 1])),
        failover=draw(st.sampled_from([0.0, 0.005, 0.02])), failback=draw(st.sampled_from([0.0, 0.01, 0.5])),
    )  # fmt: skip


def policies(draw) -> tuple:
    """Two equal policies, one per engine."""
    kind = draw(st.sampled_from(["fixed", "intensity", "las", "remaining"]))
    if kind == "fixed":
        level = draw(st.integers(0, 255))
        return FixedPriority(level), FixedPriority(level)
    if kind == "las":
        options = dict(top=draw(st.sampled_from([63, 255])), reference_bytes=draw(st.sampled_from([8.0, 4096.0])),
                       age_step=draw(st.sampled_from([0.001, 0.05])))  # fmt: skip
        return AttainedServicePriority(**options), AttainedServicePriority(**options)
    if kind == "remaining":
        options = dict(total_bytes=draw(st.sampled_from([64.0, 1e6])), reference_bytes=draw(st.sampled_from([8.0, 4096.0])),
                       age_step=draw(st.sampled_from([0.001, 0.05])))  # fmt: skip
        return RemainingWorkPriority(**options), RemainingWorkPriority(**options)
    options = dict(reference_rate=draw(st.sampled_from([1.0, 1e3])), age_step=draw(st.sampled_from([0.001, 0.05])),
                   time_constant=0.1)  # fmt: skip
    return IntensityPriority(**options), IntensityPriority(**options)


def packet(draw, config: EngineConfig, sent: list[bytes]) -> Datagram:
    """One datagram a worker might receive: about its own chunks or not, well-formed or not."""
    source = draw(st.sampled_from([SWITCH, PS, STRANGER]))
    k = config.words
    base = parse(draw(st.sampled_from(sent)), k)[0] if sent else Header(Kind.DATA, JOB, 0, lane_bits=8, bitmap=1)
    full = (1 << config.workers) - 1
    choice = draw(st.sampled_from(["result", "status", "fetch", "forged", "mutated", "noise"]))
    if choice == "noise":
        return Datagram(draw(st.binary(max_size=40)), source)
    if choice in ("result", "forged", "mutated"):
        header = base.with_(kind=Kind.RESULT, rank=0, priority=0, flags=base.flags & Flag.MAX, bitmap=full)
        if choice == "forged":
            header = header.with_(
                seq=draw(st.sampled_from([header.seq, (header.seq + 1) % 2**32, (header.seq - config.window) % 2**32,
                                          draw(st.integers(0, 2**32 - 1))])),
                flags=draw(st.sampled_from([Flag.NONE, Flag.MAX, Flag.MAX | Flag.RESEND])),
                lane_bits=draw(st.sampled_from([8, 16, 32])), index_bits=draw(st.sampled_from([0, header.index_bits, 3])),
                bitmap=draw(st.sampled_from([full, full >> 1, 2**32 - 1])), job=draw(st.sampled_from([JOB, JOB + 1])),
            )  # fmt: skip
        words = result_words(k, header.index_bits, header.lane_bits)
        data = header.pack(np.array(draw(st.lists(st.integers(0, 2**32 - 1), min_size=words, max_size=words)), np.uint32))
    elif choice == "status":
        data = Header(Kind.STATUS, JOB, base.seq, bitmap=draw(st.integers(0, full))).pack()
    else:
        data = Header(Kind.FETCH, JOB, draw(st.sampled_from([base.seq, (base.seq + 5) % 2**32])), lane_bits=8).pack()
    if choice == "mutated":
        data = bytearray(data)
        cut = draw(st.integers(0, len(data)))
        if draw(st.booleans()):
            data = data[:cut] if draw(st.booleans()) else data + b"\0"
        else:
            data[min(cut, len(data) - 1)] ^= 1 << draw(st.integers(0, 7))
        data = bytes(data)
    return Datagram(data, source)


def same(python: Engine, native: NativeEngine) -> None:
    """Both engines in the same observable state."""
    assert native.counters == python.counters
    assert native.next_deadline() == python.next_deadline()
    assert native.idle == python.idle
    assert str(native.error) == str(python.error)
    assert native.rtt.rto == python.rtt.rto
    got, want = native.completed(), python.completed()
    assert [h for h, _ in got] == [h for h, _ in want]
    for (_, a), (_, b) in zip(got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_native_engine_does_what_the_reference_does_with_any_packets(data):
    draw = data.draw
    config = configs(draw)
    first, second = policies(draw)
    python, native = Engine(config, first), NativeEngine(config, second)
    now, sent = 0.0, []
    for _ in range(draw(st.integers(1, 40))):
        action = draw(st.sampled_from(["submit", "tick", "receive", "receive", "answer"]))
        if action == "submit":
            op = draw(st.sampled_from(["sum", "max"]))
            lane_bits = 32 if op == "max" else draw(st.sampled_from([8, 16, 32]))
            index_bits = draw(st.sampled_from([0, 4])) if config.ps_only and op == "sum" else 0
            words = np.array(draw(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=4 * config.words + 1)), np.uint32)
            in_place = not index_bits and draw(st.booleans())  # the sums replace each engine's own copy of the words
            handles = []
            for engine in (python, native):
                mine = words.copy()
                try:
                    handles.append(engine.submit(mine, op=op, lane_bits=lane_bits, index_bits=index_bits, now=now,
                                                 out=mine if in_place else None))  # fmt: skip
                except Exception as error:  # noqa: BLE001 - both must raise the same
                    handles.append((type(error), str(error)))
            assert handles[0] == handles[1]
            continue
        if action == "tick":
            now += draw(st.sampled_from([0.0, 0.0005, 0.002, 0.01, 0.05]))
            out = [python.tick(now), native.tick(now)]
        else:
            if action == "answer" and sent:  # every chunk sent so far answered correctly, shuffled
                full = (1 << config.workers) - 1
                batch = []
                for raw in draw(st.permutations(sent[-8:])):
                    header = parse(raw, config.words)[0]
                    header = header.with_(kind=Kind.RESULT, rank=0, priority=0, flags=header.flags & Flag.MAX, bitmap=full)
                    batch.append(Datagram(header.pack(np.full(result_words(config.words, header.index_bits,
                                                                            header.lane_bits), header.seq, np.uint32)),
                                          draw(st.sampled_from(sorted(config.sources)))))  # fmt: skip
            else:
                batch = [packet(draw, config, sent) for _ in range(draw(st.integers(0, 20)))]
            now += draw(st.sampled_from([0.0, 0.0003]))
            out = [python.receive(batch, now), native.receive(batch, now)]
        assert out[1] == out[0]
        sent += [d.data for d in out[0] if d.addr == config.destination and d.data[2] == Kind.DATA]
        same(python, native)
