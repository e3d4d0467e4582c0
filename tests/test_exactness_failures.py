"""Liveness and isolation end to end: a dead worker, PS or switch yields a TransportError within
peer_timeout of simulated time, never a hang; forged and malformed packets change no result."""

from __future__ import annotations

import numpy as np
import pytest
from exactness_support import THC_TABLE, assert_exact, collect, indices, lanes, submit_all, packet_path  # noqa: F401 (each test on both paths)
from test_exactness import K, cluster

from ina.net.node import Datagram
from ina.protocol import Flag, Header, Kind
from ina.sim.cluster import PS_ADDR, SWITCH_ADDR, Cluster
from ina.transport.errors import TransportError

PEER_TIMEOUT = 0.05


def failing(net: Cluster, plan: dict, dead: frozenset[tuple[int, int]] = frozenset()) -> list[TransportError]:
    """Submit `plan`, run until every engine but the `dead` (job, rank)s has failed; their errors.

    Ten times peer_timeout of simulated time is the bound: reaching it fails the test as a hang.
    """
    engines = [e for group in net.jobs.values() for e in group if (e.config.job, e.config.rank) not in dead]
    submit_all(net, plan)
    assert net.net.run_until(lambda: all(e.error is not None for e in engines), 10 * PEER_TIMEOUT)
    return [e.error for e in engines]


def small(**options) -> Cluster:
    return cluster(peer_timeout=PEER_TIMEOUT, **options)


@pytest.mark.parametrize("switch", [True, False])
def test_a_dead_worker_fails_its_peers_within_peer_timeout_naming_it(switch):
    net = small(switch=switch)
    rng = np.random.default_rng(0)
    net.add_job(1, 3, window=2, **({} if switch else dict(index_bits=4, table=THC_TABLE)))
    net.net.kill(net.address(0, 2))
    plan = {1: [lanes(rng, 3, 4 * K * 2) if switch else indices(rng, 3, 2, K)]}
    errors = failing(net, plan, dead=frozenset({(1, 2)}))
    assert len(errors) == 2
    assert net.net.now <= PEER_TIMEOUT + 1e-9
    for error in errors:
        assert "job 1" in str(error) and "chunk 0" in str(error)
        assert "no contribution from ranks [2]" in str(error)


def test_a_dead_ps_fails_jobs_whose_chunks_need_it():
    net = small(pool=1)
    rng = np.random.default_rng(1)
    plan = {}
    for job in (1, 2):
        net.add_job(job, 2, window=1)
        plan[job] = [lanes(rng, 2, 4 * K * 6)]
    net.net.kill(PS_ADDR)
    engines = [e for group in net.jobs.values() for e in group]
    submit_all(net, plan, {(1, 1): 3e-5, (2, 0): 1e-5, (2, 1): 1e-5})  # job 2 meets job 1's half-full slot
    assert net.net.run_until(lambda: any(e.error is not None for e in engines), 10 * PEER_TIMEOUT)
    assert net.net.now <= 1e-5 + PEER_TIMEOUT + 1e-9  # job 2 started at 10 us
    assert all("no STATUS came from the PS" in str(e.error) for e in engines if e.error is not None)


@pytest.mark.parametrize("at", [0.0, 3e-4])
def test_a_dead_switch_fails_every_worker_within_peer_timeout(at):
    net = small()
    rng = np.random.default_rng(2)
    plan = {1: [lanes(rng, 2, 4 * K * 50)], 2: [lanes(rng, 3, 4 * K * 50)]}
    for job, (first, *_) in plan.items():
        net.add_job(job, len(first.words), window=2)
    net.net.kill(SWITCH_ADDR, at=at)
    errors = failing(net, plan)
    assert len(errors) == 5
    assert net.net.now <= at + PEER_TIMEOUT + 1e-3
    host, port = SWITCH_ADDR
    assert all(f"switch at {host}:{port}" in str(e) for e in errors)


def test_a_dead_ps_in_ps_only_mode_is_named():
    net = small(switch=False)
    net.add_job(1, 2, window=2, index_bits=4, table=THC_TABLE)
    net.net.kill(PS_ADDR)
    errors = failing(net, {1: [indices(np.random.default_rng(3), 2, 1, K)]})
    host, port = PS_ADDR
    assert len(errors) == 2 and all(f"PS at {host}:{port}" in str(e) for e in errors)


def test_forged_and_malformed_packets_mid_run_change_nothing():
    net = cluster(drop=0.01, seed=9)
    rng = np.random.default_rng(9)
    plan = {}
    for job, workers in ((1, 3), (2, 2)):
        net.add_job(job, workers, window=3)
        plan[job] = [lanes(rng, workers, 4 * K * 8) for _ in range(2)]
    submit_all(net, plan)
    stranger = ("10.9.9.9", 666)
    victim = net.address(0, 0)
    forged_result = Header(Kind.RESULT, 1, seq=0, lane_bits=8, bitmap=0b111).pack(np.full(K, 0xFF, np.uint32))
    forged_data = Header(Kind.DATA, 1, seq=1, rank=1, slot=1, lane_bits=8, bitmap=0b10).pack(np.full(K, 7, np.uint32))
    unasked = Header(Kind.RESULT, 1, seq=2**31, lane_bits=8, bitmap=0b111).pack(np.full(K, 0xFF, np.uint32))
    for step in range(40):
        at = step * 2e-5
        garbage = rng.integers(0, 256, size=int(rng.integers(0, 60)), dtype=np.uint8).tobytes()
        for target, source in ((SWITCH_ADDR, victim), (PS_ADDR, victim), (victim, SWITCH_ADDR), (victim, stranger)):
            net.net.inject(Datagram(garbage, target), source=source, at=at)
        net.net.inject(Datagram(forged_result, victim), source=stranger, at=at)            # RESULT from nobody
        net.net.inject(Datagram(forged_data, SWITCH_ADDR), source=stranger, at=at)        # DATA from an unregistered host
        net.net.inject(Datagram(Header(Kind.FLUSH, 1, seq=step).pack(), SWITCH_ADDR), source=stranger, at=at)
        net.net.inject(Datagram(forged_result, PS_ADDR), source=stranger, at=at)           # RESULT from nobody
        net.net.inject(Datagram(unasked, PS_ADDR), source=victim, at=at)                   # a worker's, for no FETCH
    assert_exact(collect(net, plan, timeout=5.0), plan)
    net.net.run(until=1e-3)  # deliver what is left of the injections
    engine = net.jobs[1][0]
    # Every link drops 1 %: of each 40 injections a few may never arrive.
    assert engine.counters["foreign"] >= 40 and engine.counters["malformed"] > 0
    assert net.switch_core.counters()["unregistered"] >= 72 and net.switch_core.counters()["malformed"] > 0
    assert net.ps.counters()["unregistered"] >= 36 and net.ps.counters()["unsolicited"] >= 36


def test_a_chunk_of_another_jobs_operation_is_not_taken_as_a_result():
    """A RESULT from the real switch address with the wrong op must not complete a SUM chunk."""
    net = cluster()
    net.add_job(1, 1, window=1)
    engine = net.jobs[1][0]
    net.net.invoke(net.address(0, 0), lambda now: engine.submit(np.ones(K, np.uint32), lane_bits=8, now=now) and None)
    wrong = Header(Kind.RESULT, 1, seq=0, flags=Flag.MAX, lane_bits=32, bitmap=1).pack(np.zeros(K, np.uint32))
    net.net.inject(Datagram(wrong, net.address(0, 0)), source=SWITCH_ADDR, at=0.0)
    net.net.run(until=1e-3)
    assert engine.counters["unexpected"] == 1
    assert [w.tolist() for _, w in engine.completed()] == [[1] * K]
