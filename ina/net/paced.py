"""A node slowed to a packet rate: the software switch as slow as a software target (BMv2) is.

A switch that cannot keep up with its workers changes which pool policy wins (docs/simulator.md,
"A switch that is itself the bottleneck"); `ina switch --max-pps N` serves the reference switch at
that rate, so the testbed can show the regime with the reference program and compare it with BMv2.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ina.net.node import Datagram, Node


@dataclass(slots=True)
class PacedNode:
    """`node`, taking `1 / packets_per_second` seconds of service per received datagram.

    A batch's outputs leave when its service ends; datagrams that arrive meanwhile wait in the
    socket's receive buffer, as they wait in a software switch's capture ring. Timers are not paced.
    """

    node: Node
    packets_per_second: float
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _free_at: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if not self.packets_per_second > 0:
            raise ValueError(f"a paced node needs a positive packet rate, got {self.packets_per_second}")

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        started = max(self._free_at, self.clock())
        sent = self.node.receive(datagrams, now)
        self._free_at = started + len(datagrams) / self.packets_per_second
        wait = self._free_at - self.clock()
        if wait > 0:
            self.sleep(wait)
        return sent

    def tick(self, now: float) -> list[Datagram]:
        return self.node.tick(now)

    def next_deadline(self) -> float | None:
        return self.node.next_deadline()
