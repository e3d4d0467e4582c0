"""A result lost twice: the switch's RESULT to one worker and its copy to the PS. Only the other
workers still hold it; the PS must FETCH it from them (docs/protocol.md, sections 6 and 8)."""

from __future__ import annotations

import numpy as np
import pytest
from exactness_support import assert_exact, collect, lanes, lose_first, submit_all, packet_path  # noqa: F401 (each test on both paths)
from test_exactness import K, cluster

from ina.protocol import Kind
from ina.sim.cluster import PS_ADDR, SWITCH_ADDR

CHUNKS = 8


@pytest.mark.parametrize("seq", [1, CHUNKS - 1], ids=["mid-stream", "last-chunk"])
@pytest.mark.parametrize("fetch_lost", [False, True], ids=["", "first-fetches-lost"])
def test_a_result_lost_by_a_worker_and_the_ps_is_fetched_from_another_worker(seq, fetch_lost):
    net = cluster(peer_timeout=0.05)
    net.add_job(1, 3, window=2)
    victim = net.address(0, 0)
    lose_first(net, Kind.RESULT, 1, seq, SWITCH_ADDR, victim)
    lose_first(net, Kind.RESULT, 1, seq, SWITCH_ADDR, PS_ADDR)
    if fetch_lost:
        for rank in (1, 2):
            lose_first(net, Kind.FETCH, 1, seq, PS_ADDR, net.address(0, rank))
    plan = {1: [lanes(np.random.default_rng(seq), 3, 4 * K * CHUNKS)]}
    submit_all(net, plan)
    assert_exact(collect(net, plan, timeout=1.0), plan)
    assert net.net.counters["dropped_by_rule"] == (4 if fetch_lost else 2)
    ps = net.ps.counters()
    assert ps["fetched"] == 1 and ps["fetch_sent"] >= (4 if fetch_lost else 2)
    answered = sum(engine.counters["fetch_answered"] for engine in net.jobs[1])
    assert answered >= 1 and net.jobs[1][0].counters["fetch_answered"] == 0
