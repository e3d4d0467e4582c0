"""A node whose packets leave a fixed time after they are sent: a long path through the software switch.

The testbed's kernel has no netem, so its links cannot delay. `ina switch --latency MS` holds every
packet the switch sends for that long instead: every path through the switch (worker to worker, worker
to PS) gets that much more round trip, so that more chunks are in flight than the pool has slots, as on
a line-rate switch with a bandwidth-delay product larger than its pool (ESA's regime, testbed/README.md).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Sequence

from ina.net.node import Datagram, Node


@dataclass(slots=True)
class DelayedNode:
    """`node`, whose output datagrams (received packets' and timers' alike) leave `latency` seconds late, in order."""

    node: Node
    latency: float
    _held: list[tuple[float, int, Datagram]] = field(default_factory=list, init=False)
    _order: itertools.count = field(default_factory=itertools.count, init=False)

    def __post_init__(self) -> None:
        if not self.latency > 0:
            raise ValueError(f"a delayed node needs a positive latency, got {self.latency}")

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        self._hold(self.node.receive(datagrams, now), now)
        return self._due(now)

    def tick(self, now: float) -> list[Datagram]:
        deadline = self.node.next_deadline()
        if deadline is not None and deadline <= now:
            self._hold(self.node.tick(now), now)
        return self._due(now)

    def next_deadline(self) -> float | None:
        deadlines = [d for d in (self.node.next_deadline(), self._held[0][0] if self._held else None) if d is not None]
        return min(deadlines) if deadlines else None

    def _hold(self, datagrams: list[Datagram], now: float) -> None:
        for datagram in datagrams:
            heapq.heappush(self._held, (now + self.latency, next(self._order), datagram))

    def _due(self, now: float) -> list[Datagram]:
        due = []
        while self._held and self._held[0][0] <= now:
            due.append(heapq.heappop(self._held)[2])
        return due
