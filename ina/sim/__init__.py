"""A deterministic discrete-event network for `Node`s (docs/simulator.md).

The switch, the PS and the worker engines run unchanged inside it; time is simulated,
so tests cover loss, reordering and dead peers in milliseconds, and the contention
benchmark models 100 Gb/s-class links on a laptop.
"""

from ina.sim.link import Faults, Link
from ina.sim.network import Network

__all__ = ["Faults", "Link", "Network"]
