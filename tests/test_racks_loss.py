"""A racked job (docs/protocol.md, section 10) under loss, in the simulator: what one lost packet costs at each place
a chunk crosses, counted, not timed. Every worker resends a chunk whose RESULT a later chunk's overtook at once
(section 8, "Early resends"), so a lost DATA, a rack's sum lost on its way up and a RESULT lost on its way down
each recover without one retransmission timeout anywhere; and every worker still gets the collective's sums."""

from __future__ import annotations

import numpy as np
import pytest
from exactness_support import assert_exact, collect, lanes, lose_first, submit_all, packet_path  # noqa: F401 (each test on both paths)

from ina.protocol import Kind
from ina.sim import Faults, Link
from ina.sim.cluster import SWITCH_ADDR, Cluster, Hosts, leaf_address

K, RACKS, JOB, CHUNKS, LOST = 8, (2, 2, 2), 1, 24, 9
WORKERS = sum(RACKS)


def racks(*, early_resend: int = 3, faults: Faults | None = None, seed: int = 0) -> Cluster:
    """Three racks of two under a spine, 100 MB/s links of 10 us; min_rto 20 ms, far above every round trip, as
    a job's skew sets it: a timeout is a stall a loss should not cost."""
    link = Link(bandwidth=1e8, latency=1e-5, faults=faults)
    net = Cluster(words=K, pool=16, leaves=len(RACKS), seed=seed, workers=Hosts(link), ps_host=Hosts(link, coalesce=2e-5),
                  switch_host=Hosts(link, coalesce=2e-5), ps_options=dict(flush_delay=5e-4),
                  engine=dict(min_rto=0.02, initial_rto=0.02, max_rto=0.2, peer_timeout=5.0, early_resend=early_resend))  # fmt: skip
    net.add_job(JOB, WORKERS, window=8, racks=RACKS)
    return net


def run(net: Cluster) -> dict[str, int]:
    """One reduction of CHUNKS chunks on every rank: exact at every rank; the engines' counters summed."""
    plan = {JOB: [lanes(np.random.default_rng(3), WORKERS, 4 * K * CHUNKS)]}
    submit_all(net, plan)
    assert_exact(collect(net, plan, timeout=10.0), plan)
    total: dict[str, int] = {}
    for engine in net.jobs[JOB]:
        for name, count in engine.counters.items():
            total[name] = total.get(name, 0) + count
    return total


LOSSES = {  # where chunk LOST loses one packet, and how many ranks then miss its RESULT
    "a worker's DATA": (Kind.DATA, lambda net: net.address(0, 1), lambda net: leaf_address(0), WORKERS),
    "a rack's sum on its way up": (Kind.DATA, lambda net: leaf_address(0), lambda net: SWITCH_ADDR, WORKERS),
    "the spine's RESULT to a leaf": (Kind.RESULT, lambda net: SWITCH_ADDR, lambda net: leaf_address(1), RACKS[1]),
    "a leaf's RESULT to a worker": (Kind.RESULT, lambda net: leaf_address(2), lambda net: net.address(0, 4), 1),
}


@pytest.mark.parametrize("loss", LOSSES)
def test_one_lost_packet_anywhere_costs_one_early_resend_a_rank_that_misses_the_result_and_no_timeout(loss):
    kind, source, destination, missing = LOSSES[loss]
    net = racks()
    lose_first(net, kind, JOB, LOST, source(net), destination(net))
    counters = run(net)
    assert net.net.counters["dropped_by_rule"] == 1
    assert counters["resent"] == counters["early_resent"] == missing


@pytest.mark.parametrize("loss", LOSSES)
def test_without_early_resends_the_same_loss_costs_a_timeout_at_every_rank_that_misses_the_result(loss):
    """What the racked job paid before early resends: a timeout (min_rto, here 200 round trips) of every rank missing
    the RESULT, and with a RESULT lost to some ranks only, the others' windows' timeouts behind them."""
    kind, source, destination, missing = LOSSES[loss]
    net = racks(early_resend=0)
    lose_first(net, kind, JOB, LOST, source(net), destination(net))
    counters = run(net)
    assert counters["resent"] >= missing and "early_resent" not in counters
    if missing < WORKERS:
        assert counters["resent"] > WORKERS


def test_a_lossless_racked_job_resends_nothing():
    net = racks()
    counters = run(net)
    assert "resent" not in counters
    assert net.ps.counters()["rx_data"] == 0 and net.switch_core.counters()["completed"] == CHUNKS


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_under_loss_duplication_and_reordering_on_every_link_sums_stay_exact(seed):
    """2% loss, duplication and reordering on every link, both ways: every rank gets the collective's sums, whatever
    mix of early resends, timeouts, flushes and PS completions recovered them."""
    counters = run(racks(faults=Faults(drop=0.02, duplicate=0.02, reorder=0.02, max_delay=5e-5), seed=seed))
    assert counters["early_resent"] > 0
