"""A training worker for simulations: compute, then one reduction, for a number of iterations.

It wraps a worker `Engine` and is itself a `Node`, so a job's completion time comes out of
the same packet-level run as everything else.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ina.net.node import Datagram
from ina.transport.engine import Engine


class TrainingLoop:
    """`iterations` x (`compute` seconds of work, then a SUM reduction of `words` 32-bit words).

    Each iteration's compute time varies uniformly by +-`jitter` (a fraction), drawn from
    `rng`: workers of one job then reach their reduction at slightly different times, as
    real ones do, and the first to arrive holds aggregator slots until the last arrives.
    """

    def __init__(self, engine: Engine, *, iterations: int, compute: float, words: int, lane_bits: int = 8,
                 jitter: float = 0.0, rng: np.random.Generator | None = None) -> None:
        if iterations < 1 or compute < 0 or words < 1 or not 0 <= jitter < 1:
            raise ValueError("need iterations >= 1, compute >= 0, words >= 1, 0 <= jitter < 1")
        self.engine = engine
        self.iterations = iterations
        self.compute = compute
        self.lane_bits = lane_bits
        self.jitter = jitter
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.gradient = np.zeros(words, dtype=np.uint32)
        self.done_iterations = 0
        self.finished_at: float | None = None
        self._compute_until: float | None = self._work()

    def _work(self, now: float = 0.0) -> float:
        """When the next iteration's compute, started at `now`, ends."""
        return now + self.compute * (1 + self.jitter * self.rng.uniform(-1.0, 1.0))

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        out = self.engine.receive(datagrams, now)
        for _ in self.engine.completed():
            self.done_iterations += 1
            if self.done_iterations == self.iterations:
                self.finished_at = now
            else:
                self._compute_until = self._work(now)
        return out

    def tick(self, now: float) -> list[Datagram]:
        if self._compute_until is not None and self._compute_until <= now:
            self._compute_until = None
            self.engine.submit(self.gradient, lane_bits=self.lane_bits, now=now)
        return self.engine.tick(now)

    def next_deadline(self) -> float | None:
        times = [t for t in (self._compute_until, self.engine.next_deadline()) if t is not None]
        return min(times, default=None)
