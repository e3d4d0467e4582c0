"""Seeded fault injection: drop, duplicate and reorder datagrams at given rates.

`FaultInjector` transforms a stream of datagrams (the simulator can put one on each link);
`FaultyNode` wraps a `Node` so that what it receives and what it sends pass through
injectors, which is how `ina switch --drop ... --reorder ...` runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ina.net.node import Datagram, Node


@dataclass(slots=True)
class _Held:
    """A reordered datagram: released after `countdown` later datagrams pass, or at `deadline`."""

    countdown: int
    deadline: float
    datagram: Datagram


@dataclass(slots=True)
class FaultStats:
    seen: int = 0
    dropped: int = 0
    duplicated: int = 0
    reordered: int = 0


class FaultInjector:
    """Each datagram is dropped with probability `drop`; a survivor is followed by a copy with
    probability `duplicate`, and held back with probability `reorder` until 1..`max_hold` later
    datagrams have passed or `hold_time` seconds have gone by (via `tick`), so reordering never
    loses anything. Deterministic for a given seed and sequence of calls."""

    def __init__(self, drop: float = 0.0, duplicate: float = 0.0, reorder: float = 0.0, seed: int = 0,
                 max_hold: int = 8, hold_time: float = 0.002) -> None:  # fmt: skip
        for name, rate in (("drop", drop), ("duplicate", duplicate), ("reorder", reorder)):
            if not 0.0 <= rate < 1.0:
                raise ValueError(f"{name} rate must be in [0, 1), got {rate}")
        if max_hold < 1 or hold_time <= 0:
            raise ValueError(f"max_hold must be >= 1 and hold_time > 0, got {max_hold} and {hold_time}")
        self.rates = (drop, duplicate, reorder)
        self.max_hold = max_hold
        self.hold_time = hold_time
        self.stats = FaultStats()
        self._rng = np.random.default_rng(seed)
        self._held: list[_Held] = []

    @property
    def active(self) -> bool:
        return any(self.rates)

    def apply(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        """What comes out of the faulty link when `datagrams` go in at `now`."""
        count = len(datagrams)
        if not count:
            return []
        draws = self._rng.random((count, 3))
        holds = self._rng.integers(1, self.max_hold + 1, count)
        drop, duplicate, reorder = self.rates
        self.stats.seen += count
        out: list[Datagram] = []
        for d, (u_drop, u_dup, u_reorder), hold in zip(datagrams, draws.tolist(), holds.tolist()):
            if u_drop < drop:
                self.stats.dropped += 1
                continue
            copies = 2 if u_dup < duplicate else 1
            self.stats.duplicated += copies - 1
            if u_reorder < reorder:
                self.stats.reordered += 1
                self._held.extend(_Held(hold, now + self.hold_time, d) for _ in range(copies))
                continue
            for _ in range(copies):
                out.append(d)
                self._passed(out)
        return out

    def _passed(self, out: list[Datagram]) -> None:
        """One datagram went through: count down the held ones and release those that are due."""
        kept = []
        for held in self._held:
            held.countdown -= 1
            if held.countdown > 0:
                kept.append(held)
            else:
                out.append(held.datagram)
        self._held = kept

    def tick(self, now: float) -> list[Datagram]:
        """Release datagrams held for `hold_time`."""
        out = [h.datagram for h in self._held if h.deadline <= now]
        self._held = [h for h in self._held if h.deadline > now]
        return out

    def next_deadline(self) -> float | None:
        return min((h.deadline for h in self._held), default=None)


@dataclass
class FaultyNode:
    """A `Node` whose input and output pass through fault injectors."""

    node: Node
    inbound: FaultInjector = field(default_factory=FaultInjector)
    outbound: FaultInjector = field(default_factory=FaultInjector)

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        arrived = self.inbound.apply(datagrams, now)
        return self.outbound.apply(self.node.receive(arrived, now) if arrived else [], now)

    def tick(self, now: float) -> list[Datagram]:
        late = self.inbound.tick(now)
        sent = (self.node.receive(late, now) if late else []) + self.node.tick(now)
        return self.outbound.apply(sent, now) + self.outbound.tick(now)

    def next_deadline(self) -> float | None:
        deadlines = [d for d in (self.inbound.next_deadline(), self.node.next_deadline(), self.outbound.next_deadline()) if d is not None]
        return min(deadlines, default=None)
