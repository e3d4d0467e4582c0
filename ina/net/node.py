"""The sans-IO interface every packet-processing program implements.

The software switch, the PS and the worker transport engine are written as `Node`s:
they take datagrams and the current time and return datagrams to send. The same code
then runs behind real UDP sockets (`ina.net.udp`) and inside the deterministic network
simulator that the property tests and the contention benchmark use.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, Sequence

Address = tuple[str, int]


class Datagram(NamedTuple):
    """A UDP payload and its peer: the source when received, the destination when sent.

    A tuple, because nodes build one per packet on their hot paths."""

    data: bytes
    addr: Address


class Node(Protocol):
    """A packet program driven by arriving datagrams and by its own timers."""

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        """Process datagrams that arrived (in order) at time `now`; return what to send."""
        ...

    def tick(self, now: float) -> list[Datagram]:
        """Run timers due at `now` (resends, flush requests, sweeps); return what to send."""
        ...

    def next_deadline(self) -> float | None:
        """When `tick` next has work, or None."""
        ...
