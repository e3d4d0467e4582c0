"""End-host priority policies (docs/protocol.md, section 9)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from engine_paths import engine_paths

from ina.net.node import Datagram
from ina.protocol import Kind, parse
from ina.transport.engine import Engine, EngineConfig
from ina.transport.priority import AttainedServicePriority, FixedPriority, IntensityPriority, PriorityPolicy, RemainingWorkPriority

use_each_engine = engine_paths(__name__)


def steady(policy: IntensityPriority, nbytes: int, period: float, until: float) -> None:
    t = 0.0
    while t <= until:
        policy.observe(nbytes, t)
        t += period


def test_both_policies_satisfy_the_protocol():
    assert isinstance(FixedPriority(3), PriorityPolicy)
    assert isinstance(IntensityPriority(), PriorityPolicy)


def test_fixed_priority_is_fixed_and_bounded():
    policy = FixedPriority(42)
    policy.observe(10**9, 0.0)
    assert policy.priority(0.0, 100.0) == 42
    with pytest.raises(ValueError):
        FixedPriority(256)


def test_rate_estimate_converges_to_the_jobs_bytes_per_second():
    policy = IntensityPriority(time_constant=1.0)
    steady(policy, nbytes=1000, period=0.01, until=10.0)
    assert policy.rate(10.0) == pytest.approx(100_000, rel=0.01)
    assert policy.rate(12.0) == pytest.approx(100_000 * math.exp(-2), rel=0.01)  # forgets an idle job


def test_communication_intensive_jobs_rank_higher():
    light, heavy = IntensityPriority(), IntensityPriority()
    steady(light, nbytes=10_000, period=0.1, until=10.0)      # 100 kB/s
    steady(heavy, nbytes=1_000_000, period=0.1, until=10.0)   # 10 MB/s
    assert heavy.base(10.0) > light.base(10.0) > 0
    # log scale: a 100x faster job is log2 levels_per_doubling apart, not saturated
    assert heavy.base(10.0) < 255
    assert IntensityPriority().base(0.0) == 0


def test_waiting_chunks_age_one_level_per_step_up_to_the_cap():
    policy = IntensityPriority(age_step=0.01)
    assert [policy.priority(1.0, 1.0 + w) for w in (0.0, 0.0099, 0.01, 0.05)] == [0, 0, 1, 5]
    assert policy.priority(0.0, 1000.0) == 255


def test_least_attained_service_ranks_the_job_that_has_reduced_less_higher_and_never_below_zero():
    new, old = AttainedServicePriority(), AttainedServicePriority()
    assert isinstance(new, PriorityPolicy) and new.base(0.0) == 63
    old.observe(65536, 0.0)  # one reference's worth: one doubling, 8 levels down
    assert old.base(0.0) == 55 and old.priority(0.0, 0.12) == 57  # two 50 ms steps of waiting: two up
    old.observe(2**40, 1.0)
    assert old.base(1.0) == 0 < new.base(1.0)
    with pytest.raises(ValueError):
        AttainedServicePriority(top=256)


def test_least_remaining_work_ranks_the_job_nearer_its_end_higher_and_rises_as_it_progresses():
    short, long = RemainingWorkPriority(total_bytes=65536), RemainingWorkPriority(total_bytes=7 * 65536)
    assert isinstance(short, PriorityPolicy)
    assert short.base(0.0) == 55 and long.base(0.0) == 39  # log2(1 + 1) and log2(1 + 7): 8 and 24 levels below 63
    long.observe(4 * 65536, 0.0)  # 3 references left: log2(4) = 2 doublings below the top
    assert long.remaining() == 3 * 65536 and long.base(0.0) == 47 and long.priority(0.0, 0.12) == 49
    long.observe(2**40, 1.0)  # past its total (a longer run than declared): the top, never more
    assert long.remaining() == 0 and long.base(1.0) == 63
    assert RemainingWorkPriority(total_bytes=2**60).base(0.0) == 0  # never below zero
    with pytest.raises(ValueError, match="total_bytes"):
        RemainingWorkPriority(total_bytes=0)


def test_a_jobs_work_is_its_steps_times_the_bytes_thc_hands_the_transport_a_step():
    from ina.hook import step_bytes

    # tests/test_transport_udp.py's MLP: 2,372 parameters pad to 3,072 coordinates, 12 chunks of 64 words of 8-bit lanes
    assert step_bytes(2372, workers=4) == 12 * 64 * 4
    assert step_bytes(2372, workers=32, bits=4, granularity=30) == 2 * 12 * 64 * 4  # 32 x 30 needs 16-bit lanes


def test_the_engine_writes_the_policys_answer_at_send_time():
    policy = IntensityPriority(age_step=0.01, reference_rate=1.0, levels_per_doubling=1.0, time_constant=1.0)
    config = EngineConfig(job=1, rank=0, workers=1, words=4, window=1, pool=4, destination=("s", 1),
                          sources=frozenset({("s", 1)}), min_rto=0.5, initial_rto=0.5, max_rto=0.5)
    engine = Engine(config, policy)
    engine.submit(np.ones(8, dtype=np.uint32), lane_bits=8, now=0.0)  # 32 bytes: rate 32 B/s, base 5
    (first,) = engine.tick(0.0)
    first_header, payload = parse(first.data, 4)
    assert first_header.priority == int(math.log2(33))
    result = first_header.with_(kind=Kind.RESULT, rank=0, priority=0, bitmap=1)
    (second,) = engine.receive([Datagram(result.pack(payload), ("s", 1))], 0.03)
    assert parse(second.data, 4)[0].priority == policy.base(0.03) + 3  # waited 30 ms in the queue


def test_a_policy_of_its_own_runs_on_the_python_engine_and_says_so():
    """The native core computes the built-in policies itself; any other object needs Python to call it."""
    from ina.net.udp import open_socket
    from ina.transport.native import NativeEngine, native_module
    from ina.transport.udp_engine import NativeUdpEngine, UdpEngine, serve_engine

    if native_module() is None:
        pytest.skip("ina.transport._native is not built")

    class Mine(IntensityPriority):
        pass

    config = EngineConfig(job=1, rank=0, workers=1, words=4, window=1, pool=4, destination=("127.0.0.1", 9),
                          sources=frozenset({("127.0.0.1", 9)}))  # fmt: skip
    with pytest.raises(ValueError, match="not Mine"):
        NativeEngine(config, Mine())
    with pytest.warns(RuntimeWarning, match="the policy Mine runs on the much slower Python engine"):
        python = serve_engine(config, open_socket(("127.0.0.1", 0)), Mine())
    native = serve_engine(config, open_socket(("127.0.0.1", 0)), FixedPriority(3))
    try:
        assert type(python) is UdpEngine and type(native) is NativeUdpEngine
    finally:
        python.close()
        native.close()
