"""The software parameter server (docs/protocol.md, section 6; docs/ps.md).

A numpy program that talks to workers and the switch only in packets: it imports neither
the switch nor torch.
"""

from ina.ps.core import COUNTERS, ParameterServer

__all__ = ["COUNTERS", "ParameterServer"]
