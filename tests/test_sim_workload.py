"""The simulated training loop: compute, reduce, repeat; its completion time is what the benchmark reports."""

from __future__ import annotations

import pytest

from ina.sim import Link, Network
from ina.sim.workload import TrainingLoop
from ina.transport.engine import Engine, EngineConfig
from test_engine import SWITCH, Aggregator


def test_iterations_alternate_compute_and_reduction():
    workers = [("10.0.2.1", 1), ("10.0.2.2", 1)]
    net = Network()
    net.attach(SWITCH, Aggregator(workers))
    loops = []
    for rank, addr in enumerate(workers):
        config = EngineConfig(job=1, rank=rank, workers=2, words=4, window=2, pool=4, destination=SWITCH,
                              sources=frozenset({SWITCH}), initial_rto=0.5)
        loop = TrainingLoop(Engine(config), iterations=3, compute=0.010, words=4 * 4)
        loops.append(loop)
        net.attach(addr, loop, Link(bandwidth=2000.0, latency=0.0005))
    assert net.run_until(lambda: all(loop.finished for loop in loops), timeout=1.0)
    # Per iteration: 10 ms compute, then 4 chunks of 36 bytes at 2000 B/s (18 ms a hop, +0.5 ms) in a
    # window of 2. Chunks 0, 1 reach the aggregator at 18.5, 36.5 ms, their results the worker at 37, 55;
    # chunk 2 leaves at 37 (result at 74), chunk 3 at 55 and its result is back at 92 ms.
    assert loops[0].finished_at == pytest.approx(3 * (0.010 + 0.092), rel=1e-6)
    assert loops[0].finished_at == loops[1].finished_at and loops[0].done_iterations == 3
